package rc

// The sql API. The RC plans the statement (services/gw/sqlplan), because it
// knows the fleet's label keys: a condition on a label becomes the label
// selector, on the time column the purview, on any other column a getData
// filter. The plan then runs as getData portions with the request flagged
// SQL, so the seed's SQL rules apply (date rollover retry; restart of every
// portion of every label set on a retry after a date or purview change;
// "Required DAPs dropped"). DAPs run getData on the planned arguments; the
// Agg merges them as getData and answers under the API "sql".

import (
	"errors"

	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/gw/sqlplan"
)

// planSQL turns a sql submission into getData arguments, or a status.
func (r *RC) planSQL(sub messages.RCSubmission) (messages.GetDataArgs, messages.Status) {
	a, err := sub.Arguments().SQL()
	if err != nil {
		return messages.GetDataArgs{}, messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "%v", err)
	}
	labels := r.core.LabelKeys()
	plan, err := sqlplan.Parse(a.Query, sqlplan.Schema{IsLabel: func(c string) bool { return labels[c] }})
	switch {
	case errors.Is(err, sqlplan.ErrUnsupported):
		return messages.GetDataArgs{}, messages.Errorf(messages.CodeNotSupported, messages.CodeErr, "%v", err)
	case err != nil:
		return messages.GetDataArgs{}, messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "%v", err)
	case plan.Where != nil:
		plan.Args.Where = plan.Where.Wire()
	}
	if err := plan.Args.Validate(); err != nil {
		return messages.GetDataArgs{}, messages.Errorf(messages.CodeBadRequest, messages.CodeErr, "planned getData arguments: %v", err)
	}
	return plan.Args, messages.StatusOK
}
