package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// floorServer is the least a check endpoint can do over HTTP with Echo:
// decode a check, encode a check-shaped answer. Loading it gives the floor
// Sluice is compared against.
type floorServer struct {
	URL string
	srv *http.Server
}

type floorCheck struct {
	APIKey string `json:"api_key"`
	IP     string `json:"ip"`
	Method string `json:"method"`
	Path   string `json:"path"`
	Cost   int    `json:"cost"`
	Peek   bool   `json:"peek"`
}

type floorIdentity struct {
	Kind string `json:"kind"`
	ID   string `json:"id"`
}

type floorAnswer struct {
	Allowed      bool          `json:"allowed"`
	Reason       string        `json:"reason"`
	Policy       *string       `json:"policy"`
	Tier         string        `json:"tier"`
	Identity     floorIdentity `json:"identity"`
	Limit        int64         `json:"limit"`
	Remaining    int64         `json:"remaining"`
	ResetMS      int64         `json:"reset_ms"`
	RetryAfterMS int64         `json:"retry_after_ms"`
}

func floorDecide(c floorCheck) floorAnswer {
	return floorAnswer{Allowed: true, Reason: "ok", Tier: "anonymous", Identity: floorIdentity{Kind: "ip", ID: c.IP}}
}

func startFloor() (*floorServer, error) {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.POST("/v1/check", func(c echo.Context) error {
		var chk floorCheck
		if err := c.Bind(&chk); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, floorDecide(chk))
	})
	e.POST("/v1/check/batch", func(c echo.Context) error {
		var b struct {
			Checks []floorCheck `json:"checks"`
		}
		if err := c.Bind(&b); err != nil {
			return err
		}
		out := struct {
			Results []floorAnswer `json:"results"`
		}{Results: make([]floorAnswer, len(b.Checks))}
		for i, chk := range b.Checks {
			out.Results[i] = floorDecide(chk)
		}
		return c.JSON(http.StatusOK, out)
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &floorServer{URL: "http://" + ln.Addr().String(), srv: &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}}
	go func() {
		if err := f.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			e.Logger.Error(err)
		}
	}()
	return f, nil
}

func (f *floorServer) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	f.srv.Shutdown(ctx)
}
