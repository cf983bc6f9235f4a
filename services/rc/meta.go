package rc

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/rc/core"
)

// Meta is the getMeta answer: the tables, the DAPs as this RC sees them,
// the RCs and the Aggs.
type Meta struct {
	Tables []messages.TableInfo `msgpack:"tables" json:"tables"`
	DAPs   []MetaDAP            `msgpack:"daps" json:"daps"`
	RCs    []MetaRC             `msgpack:"rcs" json:"rcs"`
	Aggs   []string             `msgpack:"aggs" json:"aggs"`
}

// MetaDAP is one DAP in a getMeta answer. Unbounded purview ends are null
// in JSON.
type MetaDAP struct {
	ID               string            `msgpack:"id" json:"id"`
	Addr             string            `msgpack:"addr" json:"addr"`
	RC               string            `msgpack:"rc,omitempty" json:"rc,omitempty"`
	Labels           messages.LabelSet `msgpack:"labels" json:"labels"`
	Tier             messages.Tier     `msgpack:"tier" json:"tier"`
	Start            *time.Time        `msgpack:"start" json:"start"`
	End              *time.Time        `msgpack:"end" json:"end"`
	Tables           []string          `msgpack:"tables" json:"tables"`
	PurviewVersion   uint64            `msgpack:"purviewVersion" json:"purviewVersion"`
	ReferenceVintage uint64            `msgpack:"referenceVintage" json:"referenceVintage"`
	Available        bool              `msgpack:"available" json:"available"`
	Running          int               `msgpack:"running" json:"running"`
}

// MetaRC is an RC in a getMeta answer.
type MetaRC struct {
	ID       string `msgpack:"id" json:"id"`
	Addr     string `msgpack:"addr" json:"addr"`
	Assembly string `msgpack:"assembly,omitempty" json:"assembly,omitempty"`
}

// PingResult is one DAP in a ping answer: reached means the DAP's
// heartbeat arrived within its last interval.
type PingResult struct {
	DAP     string            `msgpack:"dap" json:"dap"`
	Labels  messages.LabelSet `msgpack:"labels" json:"labels"`
	Tier    messages.Tier     `msgpack:"tier" json:"tier"`
	Reached bool              `msgpack:"reached" json:"reached"`
}

func tsPtr(ts int64) *time.Time {
	if ts == core.MinTS || ts == core.MaxTS {
		return nil
	}
	t := time.Unix(0, ts).UTC()
	return &t
}

func (r *RC) answerMeta(sub messages.RCSubmission, _ time.Time) {
	m := Meta{Aggs: r.cfg.AggIDs, RCs: []MetaRC{{ID: r.cfg.ID, Addr: r.cfg.Addr, Assembly: r.cfg.Assembly}}}
	tables := map[string]messages.TableInfo{}
	for _, d := range r.core.DAPs() {
		md := MetaDAP{ID: d.ID, Addr: d.Addr, RC: d.RC, Labels: d.Labels, Tier: d.Tier,
			Start: tsPtr(d.Purview.Start), End: tsPtr(d.Purview.End), PurviewVersion: d.PurviewVersion,
			ReferenceVintage: d.Vintage, Available: d.Available, Running: r.core.Running(d.ID)}
		if rec := r.daps[d.ID]; rec != nil {
			for _, t := range rec.reg.Tables {
				if have, ok := tables[t.Name]; !ok || len(have.Columns) == 0 {
					tables[t.Name] = t
				}
			}
		}
		for t := range d.Tables {
			md.Tables = append(md.Tables, t)
		}
		sort.Strings(md.Tables)
		m.DAPs = append(m.DAPs, md)
	}
	for _, t := range tables {
		m.Tables = append(m.Tables, t)
	}
	sort.Slice(m.Tables, func(i, j int) bool { return m.Tables[i].Name < m.Tables[j].Name })
	r.answerValue(sub, m)
}

// answerPing reports, per DAP matching the labels, whether it is reached:
// its last heartbeat is within its heartbeat interval (plus one for lag).
func (r *RC) answerPing(sub messages.RCSubmission, now time.Time) {
	// The GW's decoder, so that the arguments mean here what they meant there.
	args, err := sub.Arguments().Ping()
	if err != nil {
		r.answer(sub, messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "ping arguments: %v", err), nil)
		return
	}
	sel := args.Labels
	// A ping handled before the first tick after a stall of the RC's is
	// judged on its running time too (stall.go), or every DAP would be
	// reported unreached for the RC's own stall.
	r.discountStall(now)
	out := []PingResult{}
	for _, d := range r.core.DAPs() {
		if !sel.Selects(d.Labels) { // as a request selects label sets
			continue
		}
		rec := r.daps[d.ID]
		reached := rec != nil && now.Sub(rec.lastSeen) <= 2*rec.interval
		out = append(out, PingResult{DAP: d.ID, Labels: d.Labels, Tier: d.Tier, Reached: reached})
	}
	r.answerValue(sub, out)
}

// answerValue answers with v encoded in the client's content type.
func (r *RC) answerValue(sub messages.RCSubmission, v any) {
	var payload []byte
	var err error
	if sub.Content == messages.ContentJSON {
		payload, err = json.Marshal(v)
	} else {
		payload, err = msgpack.Marshal(v)
	}
	if err != nil {
		r.answer(sub, messages.Errorf(messages.CodeInternal, messages.CodeErr, "encode %s answer: %v", sub.Header.API, err), nil)
		return
	}
	r.answer(sub, messages.StatusOK, payload)
}
