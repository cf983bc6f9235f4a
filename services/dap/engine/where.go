package engine

import (
	"fmt"

	"github.com/sg-project/sg/messages"
)

// compileWhere turns a Where tree (the sql API's residual condition: OR and
// NOT over columns) into one predicate. The tree was validated (depth,
// size, operators) with the arguments.
func compileWhere(t *messages.Table, c *messages.Cond) (pred, error) {
	switch c.Op {
	case messages.CondFilter:
		return compileFilter(t, *c.Filter)
	case messages.CondNot:
		p, err := compileWhere(t, &c.Args[0])
		if err != nil {
			return nil, err
		}
		return func(i int) bool { return !p(i) }, nil
	case messages.CondAnd, messages.CondOr:
		ps := make([]pred, len(c.Args))
		for k := range c.Args {
			p, err := compileWhere(t, &c.Args[k])
			if err != nil {
				return nil, err
			}
			ps[k] = p
		}
		if c.Op == messages.CondAnd {
			return func(i int) bool {
				for _, p := range ps {
					if !p(i) {
						return false
					}
				}
				return true
			}, nil
		}
		return func(i int) bool {
			for _, p := range ps {
				if p(i) {
					return true
				}
			}
			return false
		}, nil
	}
	return nil, fmt.Errorf("%w: where: unknown operator %q", ErrFilterType, c.Op)
}
