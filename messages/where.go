package messages

// Where is a condition tree over columns that getData's filters (an AND of
// comparisons) cannot express: OR across columns, NOT. The sql API plans a
// WHERE into the time range, label selector and filters where it can, and
// carries the rest as a Where for the DAP to evaluate. It travels inside
// GetDataArgs (wire key "w"), versioned, and is bounded on decode.

import "fmt"

// WhereVersion is the version of the Where wire form.
const WhereVersion = 1

// Bounds of a Where tree: a hostile message cannot make the DAP recurse or
// allocate without end. MaxWhereDepth is what the deepest carrier of the
// arguments holds within MaxDepth: each level of the tree is two of
// msgpack's (a node, its operands), and a secondary RC's PeerPortion and an
// adopter's LogEntry wrap the arguments in two more maps. A deeper Where
// would validate at the GW and the RC and then be refused by every DAP and
// the Agg, and its request never answered
// (TestWhereAtItsLimitReachesEveryService).
const (
	MaxWhereDepth = 13
	MaxWhereNodes = 4096
)

// CondOp is the operator of a Where node.
type CondOp string

// Where node operators.
const (
	CondAnd    CondOp = "and"    // every Args
	CondOr     CondOp = "or"     // any Args
	CondNot    CondOp = "not"    // not Args[0]
	CondFilter CondOp = "filter" // Filter
)

// Where is the versioned condition tree.
type Where struct {
	V    uint8 `msgpack:"v"`
	Root Cond  `msgpack:"root"`
}

// Cond is one node of a Where tree.
type Cond struct {
	Op     CondOp  `msgpack:"op"`
	Args   []Cond  `msgpack:"args,omitempty"`
	Filter *Filter `msgpack:"f,omitempty"`
}

// Validate checks the version, the bounds and every node.
func (w *Where) Validate() error {
	if w.V == 0 || w.V > WhereVersion {
		return fmt.Errorf("%w: where v%d, this build knows v%d", ErrVersion, w.V, WhereVersion)
	}
	n := 0
	return w.Root.validate(1, &n)
}

func (c *Cond) validate(depth int, n *int) error {
	*n++
	if depth > MaxWhereDepth {
		return invalid("where", "nested deeper than %d", MaxWhereDepth)
	}
	if *n > MaxWhereNodes {
		return invalid("where", "more than %d nodes", MaxWhereNodes)
	}
	switch c.Op {
	case CondAnd, CondOr:
		if len(c.Args) < 2 || c.Filter != nil {
			return invalid("where", "%s needs two or more operands and no filter", c.Op)
		}
	case CondNot:
		if len(c.Args) != 1 || c.Filter != nil {
			return invalid("where", "not needs one operand")
		}
	case CondFilter:
		if len(c.Args) != 0 || c.Filter == nil {
			return invalid("where", "a filter node needs a filter and no operands")
		}
		if err := c.Filter.validate(); err != nil {
			return invalid("where", "filter: %v", err)
		}
		return nil
	default:
		return invalid("where", "unknown operator %.16q", string(c.Op))
	}
	for i := range c.Args {
		if err := c.Args[i].validate(depth+1, n); err != nil {
			return err
		}
	}
	return nil
}

// Columns lists the columns the tree reads (a reader that loads only the
// columns a request needs must load these too).
func (w *Where) Columns() []string {
	var out []string
	seen := map[string]bool{}
	var walk func(c *Cond)
	walk = func(c *Cond) {
		if c.Filter != nil && !seen[c.Filter.Column] {
			seen[c.Filter.Column] = true
			out = append(out, c.Filter.Column)
		}
		for i := range c.Args {
			walk(&c.Args[i])
		}
	}
	walk(&w.Root)
	return out
}
