package merge

import (
	"slices"

	"github.com/sg-project/sg/messages"
)

// rowRef names one row of a merge's output: row row of part part.
type rowRef struct{ part, row uint32 }

// gather replaces t's rows by the rows refs name, column by column, each in
// one typed loop: the k-way merge decides the order once (Windows.NextInto),
// and no row is appended through a switch per column. t's storage is reused,
// and where too small, storage given back (messages.Room): t's own.
// A symbol column whose every part is coded (DecodeCoded) comes out coded,
// its dictionary the values of the parts' that the rows use, each hashed
// once per part, not once per row; otherwise the column is of strings.
func gather(t *messages.Table, parts []*Partial, refs []rowRef) {
	for k := range t.Columns {
		gatherColumn(&t.Columns[k], parts, refs, k)
	}
}

// gatherColumn is gather of column k into c, whose type is set.
func gatherColumn(c *messages.Column, parts []*Partial, refs []rowRef, k int) {
	n := len(refs)
	c.Strings, c.Floats, c.Ints, c.Bools, c.Codes = c.Strings[:0], c.Floats[:0], c.Ints[:0], c.Bools[:0], c.Codes[:0]
	c.Dict, c.FirstSeen = nil, false
	switch c.Type {
	case messages.TypeSymbol, messages.TypeString:
		if allCoded(parts, k) {
			c.Codes, c.Dict, c.FirstSeen = gatherCodes(c.Codes, parts, k, refs)
			break
		}
		c.Strings = slices.Grow(c.Strings, n)[:n]
		for i, r := range refs {
			c.Strings[i] = parts[r.part].Rows.Columns[k].Str(int(r.row))
		}
	case messages.TypeFloat:
		c.Floats = gatherValues(c.Floats, parts, refs, func(c *messages.Column) []float64 { return c.Floats }, k)
	case messages.TypeInt, messages.TypeTimestamp:
		c.Ints = gatherValues(c.Ints, parts, refs, func(c *messages.Column) []int64 { return c.Ints }, k)
	case messages.TypeBool:
		c.Bools = gatherValues(c.Bools, parts, refs, func(c *messages.Column) []bool { return c.Bools }, k)
	}
}

// gatherValues writes column k's values at refs into out (its storage reused).
func gatherValues[T int64 | float64 | bool](out []T, parts []*Partial, refs []rowRef, values func(*messages.Column) []T, k int) []T {
	src := make([][]T, len(parts))
	for p, part := range parts {
		src[p] = values(&part.Rows.Columns[k])
	}
	out = messages.Room(out, len(refs))
	for i, r := range refs {
		out[i] = src[r.part][r.row]
	}
	return out
}

func allCoded(parts []*Partial, k int) bool {
	for _, p := range parts {
		if !p.Rows.Columns[k].Coded() {
			return false
		}
	}
	return len(parts) > 0
}

// gatherCodes is gather for a symbol column k coded in every part: each
// part's code is mapped to the output dictionary's the first time a row uses
// it. firstSeen is messages.Column.FirstSeen of the result.
func gatherCodes(out []uint32, parts []*Partial, k int, refs []rowRef) (codes []uint32, dict []string, firstSeen bool) {
	if len(parts) == 1 {
		// One part (a small request's one DAP): its codes and dictionary as
		// they are, the dictionary shared (capped: appending copies it). The
		// encoder writes only the values the rows use, in the order first
		// used (recode), so the bytes are those of a dictionary built here.
		c := &parts[0].Rows.Columns[k]
		out = messages.Room(out, len(refs))
		for i, r := range refs {
			out[i] = c.Codes[r.row]
		}
		return out, c.Dict[:len(c.Dict):len(c.Dict)], false
	}
	// The dictionary is built from nothing as the rows first use its values:
	// the codes are first-seen (messages.Column.FirstSeen), as the encoder
	// numbers them, and it writes them as they are.
	d := messages.NewDictBuilder(nil)
	src := make([][]uint32, len(parts))
	remap := make([][]uint32, len(parts)) // output code + 1; 0: not used yet
	for p, part := range parts {
		c := &part.Rows.Columns[k]
		src[p], remap[p] = c.Codes, make([]uint32, len(c.Dict))
	}
	out = messages.Room(out, len(refs))
	for i, r := range refs {
		code := src[r.part][r.row]
		m := remap[r.part][code]
		if m == 0 {
			m = d.Code(parts[r.part].Rows.Columns[k].Dict[code]) + 1
			remap[r.part][code] = m
		}
		out[i] = m - 1
	}
	return out, d.Dict(), true
}
