package demo

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/sg-project/sg/messages"
)

// Config sizes the data. Rates are per region; the zero value of a rate means its default.
type Config struct {
	Seed         uint64
	TradesPerDay int // default 14,400 (10 a minute)
	QuotesPerDay int // default 57,600 (40 a minute)
}

const bucket = time.Minute

func (c Config) rate(table string) int {
	switch {
	case table == Trade && c.TradesPerDay > 0:
		return c.TradesPerDay
	case table == Trade:
		return 14_400
	case c.QuotesPerDay > 0:
		return c.QuotesPerDay
	}
	return 57_600
}

// Rows returns the rows of a table for a region: for trade and quote those with time in
// [start, end), for instrument all of the region's instruments (the range is ignored).
func (c Config) Rows(table, region string, start, end time.Time) (messages.Table, error) {
	if _, ok := syms[region]; !ok {
		return messages.Table{}, fmt.Errorf("demo: unknown region %q", region)
	}
	switch table {
	case Trade, Quote:
		return c.timeRows(table, region, start, end), nil
	case Instrument:
		return instruments(region), nil
	}
	return messages.Table{}, fmt.Errorf("demo: unknown table %q", table)
}

func schemaOf(table string) []messages.ColumnSpec {
	for _, d := range Defs() {
		if d.Name == table {
			return d.Columns
		}
	}
	return nil
}

// timeRows generates every bucket that meets [start, end) and keeps the rows inside it.
func (c Config) timeRows(table, region string, start, end time.Time) messages.Table {
	out := messages.NewTable(schemaOf(table))
	if !end.After(start) {
		return out
	}
	for k := range out.Columns {
		out.Columns[k].Grow(c.maxRows(table, start, end)) // sized once, not regrown row by row
	}
	perDay := int64(c.rate(table))
	perBucket := int64(24 * time.Hour / bucket)
	s, e := start.UnixNano(), end.UnixNano()
	first := floorDiv(s, int64(bucket))
	for b := first; b*int64(bucket) < e; b++ {
		// Spread perDay rows over the day's buckets exactly: bucket b gets
		// floor((b+1)*r) - floor(b*r) rows, r = perDay/perBucket.
		n := floorDiv((b+1)*perDay, perBucket) - floorDiv(b*perDay, perBucket)
		c.bucketRows(&out, table, region, b, int(n), s, e)
	}
	return out
}

// maxRows bounds the rows timeRows generates for [start, end): every row of
// the buckets that meet it (exact when start and end fall on bucket bounds).
func (c Config) maxRows(table string, start, end time.Time) int {
	if !end.After(start) {
		return 0
	}
	perDay := int64(c.rate(table))
	perBucket := int64(24 * time.Hour / bucket)
	first := floorDiv(start.UnixNano(), int64(bucket))
	last := floorDiv(end.UnixNano()-1, int64(bucket)) + 1 // past the last bucket that meets it
	return int(floorDiv(last*perDay, perBucket) - floorDiv(first*perDay, perBucket))
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// source is the random source of one bucket of one table of one region.
func (c Config) source(table, region string, b int64) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(table + "/" + region))
	return rand.New(rand.NewPCG(c.Seed^h.Sum64(), uint64(b)))
}

func (c Config) bucketRows(out *messages.Table, table, region string, b int64, n int, s, e int64) {
	rng := c.source(table, region, b)
	base := b * int64(bucket)
	times := make([]int64, n)
	for i := range times {
		times[i] = base + rng.Int64N(int64(bucket))
	}
	slices.Sort(times)
	ss := syms[region]
	// Appended column by column, in the schema's order (schema.go), not as
	// AppendRow's values: boxing each value cost most of a load's garbage.
	cols := out.Columns
	for _, t := range times {
		k := rng.IntN(len(ss))
		mid := midPrice(region, k, t)
		switch table {
		case Trade:
			size := int64(1+rng.IntN(50)) * lotSize(region, k)
			side := "B"
			if rng.IntN(2) == 0 {
				side = "S"
			}
			price := roundTick(mid*(1+(rng.Float64()-0.5)*0.001), tickSize(region, k))
			venue := venues[region][rng.IntN(len(venues[region]))]
			if t >= s && t < e {
				cols[0].Ints = append(cols[0].Ints, t)
				cols[1].Strings = append(cols[1].Strings, ss[k])
				cols[2].Strings = append(cols[2].Strings, region)
				cols[3].Floats = append(cols[3].Floats, price)
				cols[4].Ints = append(cols[4].Ints, size)
				cols[5].Strings = append(cols[5].Strings, side)
				cols[6].Strings = append(cols[6].Strings, venue)
				cols[7].Bools = append(cols[7].Bools, size >= 40*lotSize(region, k))
			}
		case Quote:
			tick := tickSize(region, k)
			spread := float64(1+rng.IntN(5)) * tick
			bid := roundTick(mid-spread/2, tick)
			ask := roundTick(bid+spread, tick)
			bs, as := int64(1+rng.IntN(100))*lotSize(region, k), int64(1+rng.IntN(100))*lotSize(region, k)
			if t >= s && t < e {
				cols[0].Ints = append(cols[0].Ints, t)
				cols[1].Strings = append(cols[1].Strings, ss[k])
				cols[2].Strings = append(cols[2].Strings, region)
				cols[3].Floats = append(cols[3].Floats, bid)
				cols[4].Floats = append(cols[4].Floats, ask)
				cols[5].Ints = append(cols[5].Ints, bs)
				cols[6].Ints = append(cols[6].Ints, as)
			}
		}
	}
}

// midPrice wanders smoothly through the day around the symbol's base price; it depends on
// time only, never on earlier rows, so that buckets are independent.
func midPrice(region string, k int, t int64) float64 {
	day := float64(24 * time.Hour)
	phase := 2 * math.Pi * (float64(t%int64(day))/day + float64(k)/7)
	return basePrice(region, k) * (1 + 0.02*math.Sin(phase))
}

// basePrices are each region's symbols' base prices (a package value: a map
// literal in basePrice was built again for every generated row).
var basePrices = map[string][]float64{
	"eu":   {0.72, 4.85, 6.40, 180.5, 172.3, 790.0},
	"us":   {190.0, 410.0, 178.0, 165.0, 880.0, 195.0},
	"asia": {3400, 13500, 380, 78, 74000, 900},
}

func basePrice(region string, k int) float64 { return basePrices[region][k] }

func lotSize(region string, k int) int64 {
	if region == "asia" && k < 2 {
		return 100 // Tokyo trades in round lots
	}
	return 1
}

func tickSize(region string, k int) float64 {
	switch {
	case basePrice(region, k) >= 1000:
		return 1
	case basePrice(region, k) >= 10:
		return 0.01
	}
	return 0.0001
}

func roundTick(p, tick float64) float64 {
	// Round to a whole number of ticks, written as the nearest float to n*tick so that
	// equal prices compare equal however they were computed.
	return math.Round(p/tick) * tick
}

func instruments(region string) messages.Table {
	t := messages.NewTable(schemaOf(Instrument))
	names := map[string]string{
		"VOD.L": "Vodafone Group", "BP.L": "BP", "HSBA.L": "HSBC Holdings", "SAP.DE": "SAP",
		"SIE.DE": "Siemens", "MC.PA": "LVMH", "AAPL": "Apple", "MSFT": "Microsoft", "AMZN": "Amazon.com",
		"GOOG": "Alphabet", "NVDA": "NVIDIA", "JPM": "JPMorgan Chase", "7203.T": "Toyota Motor",
		"6758.T": "Sony Group", "0700.HK": "Tencent Holdings", "9988.HK": "Alibaba Group",
		"005930.KS": "Samsung Electronics", "2330.TW": "Taiwan Semiconductor",
	}
	for k, s := range syms[region] {
		if err := t.AppendRow(s, region, names[s], currency[region][k], lotSize(region, k), tickSize(region, k), basePrice(region, k)); err != nil {
			panic("demo: instrument row does not fit its own schema: " + err.Error())
		}
	}
	return t
}
