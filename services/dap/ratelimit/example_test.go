package ratelimit_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sg-project/sg/services/dap/ratelimit"
)

// A source calls its remote endpoint through the registry's actor for the
// endpoint's key. The endpoint refuses the first call, asking for a pause;
// the actor pauses every call to it, then tries the refused call again.
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // stops the actors

	reg := ratelimit.NewRegistry(ctx, ratelimit.Config{Slots: 4}, 0)
	actor, err := reg.Actor("ads.example.com")
	if err != nil {
		panic(err)
	}

	var mu sync.Mutex
	calls := 0
	remote := func(ctx context.Context, slot int) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return "", &ratelimit.Error{Endpoint: "ads.example.com", Delay: 20 * time.Millisecond}
		}
		return "campaign stats", nil
	}

	began := time.Now()
	v, err := ratelimit.Call(ctx, actor, remote)
	fmt.Println(v, err)
	fmt.Println("calls:", calls, "waited the pause:", time.Since(began) >= 20*time.Millisecond)
	// Output:
	// campaign stats <nil>
	// calls: 2 waited the pause: true
}
