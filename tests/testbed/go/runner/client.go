package main

import (
	"context"
	"crypto/tls"
	"net/http"
	"strings"
	"time"

	"code.gitea.io/actions-proto-go/ping/v1/pingv1connect"
	"code.gitea.io/actions-proto-go/runner/v1/runnerv1connect"
	"connectrpc.com/connect"
)

// Client speaks Gitea's runner protocol (Connect over HTTP at <instance>/api/actions).
type Client struct {
	runnerv1connect.RunnerServiceClient
	Ping pingv1connect.PingServiceClient
}

// NewClient returns a client for the instance; uuid and token authenticate a
// registered runner (both empty before registration).
func NewClient(instance string, insecure bool, uuid, token string) *Client {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if insecure {
		transport.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // runner.insecure
	}
	hc := &http.Client{Transport: transport, Timeout: 60 * time.Second}
	base := strings.TrimSuffix(instance, "/") + "/api/actions"
	auth := connect.WithInterceptors(connect.UnaryInterceptorFunc(
		func(next connect.UnaryFunc) connect.UnaryFunc {
			return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
				if uuid != "" {
					req.Header().Set("x-runner-uuid", uuid)
					req.Header().Set("x-runner-token", token)
				}
				req.Header().Set("x-runner-version", Version)
				return next(ctx, req)
			}
		}))
	return &Client{
		RunnerServiceClient: runnerv1connect.NewRunnerServiceClient(hc, base, auth),
		Ping:                pingv1connect.NewPingServiceClient(hc, base, auth),
	}
}
