package subjects

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/micro"
	"github.com/sg-project/sg/test/natstest"
)

// TestMicroEndpointSubjects checks that registering the GW endpoints the way
// the GW does (one micro group, one endpoint per API) yields exactly the
// subjects that GWAPI builds, so clients and the GW cannot disagree.
func TestMicroEndpointSubjects(t *testing.T) {
	nc := natstest.Connect(t, natstest.Start(t))

	s, _ := New("acme.sg")
	svc, err := micro.AddService(nc, micro.Config{Name: s.ServiceName(ServiceGW), Version: "0.1.0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Stop() })
	grp := svc.AddGroup(s.GWAPIGroup())
	for _, api := range APIs {
		if err := grp.AddEndpoint(api, micro.HandlerFunc(func(r micro.Request) { _ = r.Respond([]byte(api)) })); err != nil {
			t.Fatalf("AddEndpoint(%s): %v", api, err)
		}
	}
	got := map[string]string{}
	for _, ep := range svc.Info().Endpoints {
		got[ep.Name] = ep.Subject
	}
	for _, api := range APIs {
		if got[api] != s.GWAPI(api) {
			t.Errorf("endpoint %s subject %q, GWAPI builds %q", api, got[api], s.GWAPI(api))
		}
		msg, err := nc.Request(s.GWAPI(api), nil, 5*time.Second)
		if err != nil {
			t.Fatalf("request %s: %v", api, err)
		}
		if string(msg.Data) != api {
			t.Errorf("request %s answered %q", api, msg.Data)
		}
	}
}
