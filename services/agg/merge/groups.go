package merge

import (
	"encoding/binary"
	"math"

	"github.com/sg-project/sg/messages"
)

// groupIndex numbers the distinct key tuples it sees and keeps them, one row per group.
type groupIndex struct {
	index map[string]int
	keys  messages.Table
	n     int
	buf   []byte
}

func newGroupIndex(schema []messages.ColumnSpec) *groupIndex {
	return &groupIndex{index: map[string]int{}, keys: messages.NewTable(schema)}
}

// lookup returns the group of row i of the key columns src, adding it if new.
func (x *groupIndex) lookup(src []*messages.Column, i int) (g int, isNew bool) {
	if len(src) == 0 { // whole-table aggregate: one group
		if x.n == 0 {
			x.n = 1
			return 0, true
		}
		return 0, false
	}
	x.buf = x.buf[:0]
	for _, c := range src {
		x.buf = appendKey(x.buf, c, i)
	}
	if g, ok := x.index[string(x.buf)]; ok {
		return g, false
	}
	g = x.n
	x.n++
	x.index[string(x.buf)] = g
	for k, c := range src {
		dst := &x.keys.Columns[k]
		dst.AppendFrom(c, i)
		if c.Type == messages.TypeFloat {
			dst.Floats[g] = canonicalFloat(dst.Floats[g])
		}
	}
	return g, true
}

// appendKey encodes one key value so that values equal under Column.Compare (0 and -0,
// every NaN) encode the same and distinct values differently.
func appendKey(b []byte, c *messages.Column, i int) []byte {
	switch c.Type {
	case messages.TypeSymbol, messages.TypeString:
		s := c.Str(i)
		b = binary.AppendUvarint(b, uint64(len(s)))
		return append(b, s...)
	case messages.TypeFloat:
		return binary.LittleEndian.AppendUint64(b, math.Float64bits(canonicalFloat(c.Floats[i])))
	case messages.TypeInt, messages.TypeTimestamp:
		return binary.LittleEndian.AppendUint64(b, uint64(c.Ints[i]))
	case messages.TypeBool:
		if c.Bools[i] {
			return append(b, 1)
		}
		return append(b, 0)
	}
	return b
}

func canonicalFloat(f float64) float64 {
	switch {
	case f == 0:
		return 0
	case math.IsNaN(f):
		return math.NaN()
	}
	return f
}
