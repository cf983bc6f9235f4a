package demo

import (
	"github.com/sg-project/sg/messages"
	"github.com/sg-project/sg/services/dap/engine"
)

// Table names and the label key.
const (
	Trade      = "trade"
	Quote      = "quote"
	Instrument = "instrument"
	LabelKey   = "region"
)

// Regions are the values of the region label.
var Regions = []string{"eu", "us", "asia"}

var syms = map[string][]string{
	"eu":   {"VOD.L", "BP.L", "HSBA.L", "SAP.DE", "SIE.DE", "MC.PA"},
	"us":   {"AAPL", "MSFT", "AMZN", "GOOG", "NVDA", "JPM"},
	"asia": {"7203.T", "6758.T", "0700.HK", "9988.HK", "005930.KS", "2330.TW"},
}

var venues = map[string][]string{
	"eu":   {"XLON", "XETR", "XPAR", "CHIX"},
	"us":   {"XNYS", "XNAS", "ARCX", "BATS"},
	"asia": {"XTKS", "XHKG", "XKRX", "XTAI"},
}

var currency = map[string][]string{
	"eu":   {"GBP", "GBP", "GBP", "EUR", "EUR", "EUR"},
	"us":   {"USD", "USD", "USD", "USD", "USD", "USD"},
	"asia": {"JPY", "JPY", "HKD", "HKD", "KRW", "TWD"},
}

// Syms returns the symbols traded in a region (nil for an unknown region).
func Syms(region string) []string { return append([]string(nil), syms[region]...) }

// Defs returns the definitions of the three tables.
func Defs() []engine.TableDef {
	return []engine.TableDef{
		{Name: Trade, Labels: []string{LabelKey}, Columns: []messages.ColumnSpec{
			{Name: "time", Type: messages.TypeTimestamp},
			{Name: "sym", Type: messages.TypeSymbol},
			{Name: LabelKey, Type: messages.TypeSymbol},
			{Name: "price", Type: messages.TypeFloat},
			{Name: "size", Type: messages.TypeInt},
			{Name: "side", Type: messages.TypeSymbol},
			{Name: "venue", Type: messages.TypeSymbol},
			{Name: "block", Type: messages.TypeBool},
		}},
		{Name: Quote, Labels: []string{LabelKey}, Columns: []messages.ColumnSpec{
			{Name: "time", Type: messages.TypeTimestamp},
			{Name: "sym", Type: messages.TypeSymbol},
			{Name: LabelKey, Type: messages.TypeSymbol},
			{Name: "bid", Type: messages.TypeFloat},
			{Name: "ask", Type: messages.TypeFloat},
			{Name: "bidSize", Type: messages.TypeInt},
			{Name: "askSize", Type: messages.TypeInt},
		}},
		{Name: Instrument, Labels: []string{LabelKey}, Columns: []messages.ColumnSpec{
			{Name: "sym", Type: messages.TypeSymbol},
			{Name: LabelKey, Type: messages.TypeSymbol},
			{Name: "name", Type: messages.TypeString},
			{Name: "currency", Type: messages.TypeSymbol},
			{Name: "lotSize", Type: messages.TypeInt},
			{Name: "tickSize", Type: messages.TypeFloat},
			{Name: "basePrice", Type: messages.TypeFloat},
		}},
	}
}
