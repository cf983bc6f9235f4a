package merge

import (
	"cmp"
	"fmt"

	"github.com/sg-project/sg/messages"
)

// compareValues orders row i of a against row j of b column by column (same schema).
func compareValues(a *messages.Table, i int, b *messages.Table, j int) int {
	for k := range a.Columns {
		if c := a.Columns[k].Compare(i, &b.Columns[k], j); c != 0 {
			return c
		}
	}
	return 0
}

// compareRows is the canonical row order of doc item 1: time, then values.
func compareRows(a *messages.Table, ta []int64, i int, b *messages.Table, tb []int64, j int) int {
	if c := cmp.Compare(ta[i], tb[j]); c != 0 {
		return c
	}
	return compareValues(a, i, b, j)
}

// sortKey is one resolved sortCols entry.
type sortKey struct {
	col  int
	desc bool
}

// resolveSort maps sortCols onto the columns of an output schema.
func resolveSort(schema []messages.ColumnSpec, sortCols []string) ([]sortKey, error) {
	keys := make([]sortKey, 0, len(sortCols))
	for _, s := range sortCols {
		name, desc := messages.SortKey(s)
		k := -1
		for i, c := range schema {
			if c.Name == name {
				k = i
				break
			}
		}
		if k < 0 {
			return nil, fmt.Errorf("%w: %q", ErrSortColumn, name)
		}
		keys = append(keys, sortKey{col: k, desc: desc})
	}
	return keys, nil
}

// compareSort orders by the sortCols keys only.
func compareSort(keys []sortKey, a *messages.Table, i int, b *messages.Table, j int) int {
	for _, k := range keys {
		c := a.Columns[k.col].Compare(i, &b.Columns[k.col], j)
		if k.desc {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	return 0
}
