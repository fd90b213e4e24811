package sdk_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sluicehq/sluice/sdk"
)

func ExampleClient_Middleware() {
	client := sdk.New("http://127.0.0.1:8080", "sk_…")
	http.ListenAndServe(":8081", client.Middleware(http.DefaultServeMux))
}

func ExampleClient_Check() {
	client := sdk.New("http://127.0.0.1:8080", "sk_…",
		sdk.WithTimeout(50*time.Millisecond),
		sdk.FailClosed(),
	)
	d, err := client.Check(context.Background(), sdk.CheckRequest{
		IP: "203.0.113.7", Method: "GET", Path: "/api/example?mode=heavy",
	})
	if err != nil {
		// Sluice did not answer: d is the fail-closed decision.
		fmt.Println("sluice:", err)
	}
	if !d.Allowed {
		fmt.Printf("denied (%s), retry in %v\n", d.Reason, d.RetryAfter)
	}
}
