// Package demo generates seeded market data for demo DAPs: time-partitioned tables trade
// and quote, and the reference table instrument, for the label region (eu, us, asia; each
// region trades its own symbols).
//
// The data of a time range is a pure function of (seed, region, table, range), and the
// rows of [a, c) are exactly the rows of [a, b) followed by those of [b, c): time is cut
// into one-minute buckets, each generated from its own random source seeded by
// (seed, region, table, bucket), so any fleet of DAPs with disjoint purviews holds, in
// total, exactly the data of one DAP covering everything. That is what lets tests compare
// an answer assembled from many DAPs with the answer of one.
package demo
