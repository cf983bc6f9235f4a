// Package merge holds the partial result of getData and its algebra: how a DAP turns the
// rows it selected into a Partial, and how the Agg combines the Partials of one request
// (from several DAPs, tiers and portions) into the answer.
//
// Why here: the Partial crosses NATS from DAP to Agg, and both sides must agree on every
// detail of it (how avg is carried, how first/last break ties), so the type and both halves
// of its algebra live in one package. The DAP engine imports this package; nothing here
// imports the engine, so the Agg does not link the store.
//
// Exactness: for any split of the data into disjoint time ranges and label sets,
// merging the partials of the pieces gives the same table, bit for bit, as one partial of
// the whole. What makes that hold:
//  1. rows are in time order, ties broken by the values of the row (Column.Compare, column
//     by column), a total order that does not depend on where a row was stored;
//  2. a DAP may cut its rows to Limit only in that order (or in the sortCols order followed
//     by it), since the first N of a union are among the first N of each piece;
//  3. count and int sums are integers; float sums are carried as exact partial sums
//     (Shewchuk's algorithm, as in Python's math.fsum) and rounded once, at the end, so
//     they do not depend on the order of additions; avg is sum/count computed at the end;
//  4. first/last carry the time of their row; equal times are broken by the smaller
//     (first) or larger (last) value; min/max compare with Column.Compare;
//  5. groups come out in ascending key order, then sorted by sortCols (stable), then cut
//     to Limit; rows with sortCols are sorted by them, then by order 1.
package merge
