package live

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/subjects"
)

// Publisher writes table updates to the live stream: the Go API behind `sg publish`.
type Publisher struct {
	js        jetstream.JetStream
	s         subjects.Subjects
	labelKeys []string
	maxBytes  int
}

// NewPublisher returns a publisher that routes rows by the values of the label columns
// labelKeys (e.g. "region"): each label set's rows go to its own subject.
func NewPublisher(nc *nats.Conn, s subjects.Subjects, labelKeys ...string) (*Publisher, error) {
	if len(labelKeys) == 0 {
		return nil, errors.New("live: publisher needs at least one label key")
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("live: %w", err)
	}
	return &Publisher{js: js, s: s, labelKeys: labelKeys, maxBytes: int(nc.MaxPayload()) / 2}, nil
}

// Publish splits rows by label set and publishes one update per label set (more when one
// would exceed half the max payload), waiting for the stream to store each. It returns
// the stream sequences, in order. A table without the label columns is an error: the
// publisher could not say whose rows they are.
func (p *Publisher) Publish(ctx context.Context, table string, rows messages.Table) ([]uint64, error) {
	if err := rows.Validate(); err != nil {
		return nil, fmt.Errorf("live: publish %s: %w", table, err)
	}
	groups := map[string][]int{}
	sets := map[string]messages.LabelSet{}
	for i := range rows.NumRows() {
		ls := messages.LabelSet{}
		for _, k := range p.labelKeys {
			c := rows.Col(k)
			if c == nil || (c.Type != messages.TypeSymbol && c.Type != messages.TypeString) {
				return nil, fmt.Errorf("live: publish %s: rows need a text column %q (label)", table, k)
			}
			ls[k] = c.Strings[i]
		}
		key := ls.Key()
		groups[key] = append(groups[key], i)
		sets[key] = ls
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		if err := subjects.Validate("label set key", k); err != nil {
			return nil, fmt.Errorf("live: publish %s: %w", table, err)
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if err := subjects.Validate("table", table); err != nil {
		return nil, fmt.Errorf("live: publish: %w", err)
	}
	var seqs []uint64
	for _, k := range keys {
		s, err := p.publish(ctx, p.s.Live(table, k), table, rows.Take(groups[k]))
		seqs = append(seqs, s...)
		if err != nil {
			return seqs, err
		}
	}
	return seqs, nil
}

func (p *Publisher) publish(ctx context.Context, subject, table string, rows messages.Table) ([]uint64, error) {
	u := messages.LiveUpdate{V: messages.LiveVersion, Table: table, Rows: rows}
	data, err := messages.Encode(&u)
	if err != nil {
		return nil, fmt.Errorf("live: encode update of %s: %w", table, err)
	}
	if n := rows.NumRows(); len(data) > p.maxBytes && n > 1 {
		a, err := p.publish(ctx, subject, table, rows.Slice(0, n/2))
		if err != nil {
			return a, err
		}
		b, err := p.publish(ctx, subject, table, rows.Slice(n/2, n))
		return append(a, b...), err
	}
	ack, err := p.js.Publish(ctx, subject, data)
	if err != nil {
		return nil, fmt.Errorf("live: publish %d rows of %s on %s: %w", rows.NumRows(), table, subject, err)
	}
	return []uint64{ack.Sequence}, nil
}
