package rc

import (
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/rc/core"
	"github.com/sg-project/sg/subjects"
)

// submit takes a request from a GW: getData goes to the core; ping and
// getMeta are answered from the RC's view of the fleet.
func (r *RC) submit(sub messages.RCSubmission, caller string, now time.Time) {
	if len(caller) > maxCallerLen || !utf8.ValidString(caller) {
		r.metrics.badMessages.Inc()
		log := r.requestLogger(&sub, "")
		r.lim.Warn(&log, "bad_caller").Int("bytes", len(caller)).Msg("submission with a bad Sg-Caller")
		r.answer(sub, messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "%s header: want valid UTF-8 of at most %d bytes", messages.HdrCaller, maxCallerLen), nil)
		return
	}
	if _, dup := r.pending[sub.RequestID]; dup {
		log := r.requestLogger(&sub, caller)
		r.lim.Warn(&log, "duplicate_submission").Msg("duplicate submission ignored")
		return
	}
	r.metrics.requests.WithLabelValues(sub.Header.API).Inc()
	r.metrics.kxReqsTotal.Inc()
	sql := false
	var args messages.GetDataArgs
	switch sub.Header.API {
	case subjects.APIGetData:
		var err error
		args, err = sub.Arguments().GetData()
		if err == nil {
			err = args.Validate()
		}
		if err != nil {
			r.answer(sub, messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "getData arguments: %v", err), nil)
			return
		}
	case subjects.APISQL: // sql.go
		planned, st := r.planSQL(sub)
		if !st.IsOK() {
			r.answer(sub, st, nil)
			return
		}
		b, err := messages.Encode(&planned)
		if err != nil {
			r.answer(sub, messages.Errorf(messages.CodeInternal, messages.CodeErr, "encode planned sql: %v", err), nil)
			return
		}
		// DAPs and the Agg see the planned getData: new arguments, msgpack.
		sub.SetArguments(messages.MsgpackArgs(b))
		// The plan itself is the request's arguments here, validated by
		// planSQL: not decoded again from what was just encoded.
		args, sql = planned, true
	case subjects.APIGetMeta:
		r.answerMeta(sub, now)
		return
	case subjects.APIPing:
		r.answerPing(sub, now)
		return
	default:
		r.answer(sub, messages.Errorf(messages.CodeNotSupported, messages.CodeErr, "API %q is not supported by this RC", sub.Header.API), nil)
		return
	}
	p := &pendingRequest{sub: sub, arrived: now, caller: caller}
	r.pending[sub.RequestID] = p
	api := sub.Header.API
	if sql {
		api = subjects.APIGetData // what the DAPs run; SQL carries the seed's SQL rules
	}
	req := core.Request{
		ID: sub.RequestID, API: api, SQL: sql, Table: args.Table, Labels: args.Labels,
		Range: args.Range(), Deadline: sub.Deadline,
		Assembly: sub.Header.Scope.Assembly, Tier: sub.Header.Scope.Tier, // the core picks the Agg
		Caller: caller,
	}
	if r.log.GetLevel() <= zerolog.InfoLevel && zerolog.GlobalLevel() <= zerolog.InfoLevel {
		r.reqLog(sub.RequestID).Info().Str("table", args.Table).Time("deadline", time.Unix(0, sub.Deadline)).Msg("request accepted")
	}
	r.step(core.RequestArrived{At: now.UnixNano(), Request: req})
}

// requestLogger is the logger for lines about a submission: its ids, the
// GW, the caller and the caller's logCorr.
func (r *RC) requestLogger(sub *messages.RCSubmission, caller string) zerolog.Logger {
	lc := r.log.With().Str("request_id", sub.RequestID).Str("api", sub.Header.API).Str("gw_id", sub.GWID)
	if caller != "" {
		lc = lc.Str("caller", caller)
	}
	if c := sub.Header.Opts.LogCorr; c != "" {
		lc = lc.Str("log_corr", c)
	}
	return lc.Logger()
}

// maxCallerLen bounds the caller key a submission may carry (Sg-Caller).
const maxCallerLen = 256
