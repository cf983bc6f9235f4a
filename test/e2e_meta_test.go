package test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sg-project/sg/messages"
)

// getMeta lists the tables with their schemas, the DAPs with labels, tier,
// purview and versions, the RCs and the Aggs.
func TestGetMetaShowsTablesSchemasAndDAPs(t *testing.T) {
	sys := startSystem(t, systemOptions{})
	src, _ := engineSource(t, sys)
	sys.startDAP(oneDAP(src, 3))
	sys.waitDAPs(1)
	ctx, cancel := context.WithTimeout(sys.ctx, 20*time.Second)
	defer cancel()
	out, err := sys.client.DoJSON(ctx, "getMeta", nil, messages.Opts{})
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Header  messages.ResponseHeader `json:"header"`
		Payload struct {
			Tables []messages.TableInfo `json:"tables"`
			DAPs   []struct {
				ID             string            `json:"id"`
				Labels         map[string]string `json:"labels"`
				Tier           string            `json:"tier"`
				PurviewVersion uint64            `json:"purviewVersion"`
			} `json:"daps"`
			RCs  []struct{ ID string } `json:"rcs"`
			Aggs []string              `json:"aggs"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(out, &env); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	p := env.Payload
	if len(p.Tables) != 1 || p.Tables[0].Name != "trade" || p.Tables[0].Kind != messages.TablePartitioned {
		t.Fatalf("tables %+v", p.Tables)
	}
	types := map[string]messages.ColumnType{}
	for _, c := range p.Tables[0].Columns {
		types[c.Name] = c.Type
	}
	if types["time"] != messages.TypeTimestamp || types["sym"] != messages.TypeSymbol || types["price"] != messages.TypeFloat {
		t.Fatalf("trade schema %+v", p.Tables[0].Columns)
	}
	if len(p.DAPs) != 1 || p.DAPs[0].ID != "d1" || p.DAPs[0].Labels["region"] != "eu" || p.DAPs[0].Tier != "rdb" || p.DAPs[0].PurviewVersion != 3 {
		t.Fatalf("daps %+v", p.DAPs)
	}
	if len(p.RCs) != 1 || p.RCs[0].ID != "rc-1" || len(p.Aggs) != 1 {
		t.Fatalf("rcs %+v aggs %v", p.RCs, p.Aggs)
	}
}
