package sqlplan

import "github.com/sg-project/sg/messages"

// Wire is the condition tree in its wire form (messages.Where), for the
// DAP to evaluate.
func (c *Cond) Wire() *messages.Where {
	return &messages.Where{V: messages.WhereVersion, Root: c.wire()}
}

func (c *Cond) wire() messages.Cond {
	if c.Op == CondFilter {
		f := c.Filter
		return messages.Cond{Op: messages.CondFilter, Filter: &f}
	}
	out := messages.Cond{Op: messages.CondOp(c.Op), Args: make([]messages.Cond, len(c.Args))}
	for i, a := range c.Args {
		out.Args[i] = a.wire()
	}
	return out
}
