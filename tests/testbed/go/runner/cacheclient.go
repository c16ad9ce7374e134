package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// JobCache is the cache server a job uses: Register lets the job's runtime
// token read and write the repository's entries, Revoke ends that, URL is the
// job's ACTIONS_CACHE_URL.
type JobCache interface {
	Register(ctx context.Context, token, repo string) error
	Revoke(ctx context.Context, token string) error
	URL() string
}

// CacheClient lets a job's runtime token use the external cache server
// (cache.external_server) for the job's repository, and revokes it afterwards.
type CacheClient struct {
	server string // with a trailing slash
	secret string
	hc     *http.Client
}

// NewCacheClient is lenient about the trailing slash of server.
func NewCacheClient(server, secret string) *CacheClient {
	return &CacheClient{server: strings.TrimRight(server, "/") + "/", secret: secret,
		hc: &http.Client{Timeout: 15 * time.Second}}
}

// URL is what the job gets as ACTIONS_CACHE_URL.
func (c *CacheClient) URL() string { return c.server }

// Register allows token to read and write repo's cache entries.
func (c *CacheClient) Register(ctx context.Context, token, repo string) error {
	return c.post(ctx, "_internal/register", map[string]string{"token": token, "repo": repo})
}

// Revoke withdraws token.
func (c *CacheClient) Revoke(ctx context.Context, token string) error {
	return c.post(ctx, "_internal/revoke", map[string]string{"token": token})
}

func (c *CacheClient) post(ctx context.Context, path string, body any) error {
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.server+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.secret)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: the cache server answered %s", path, resp.Status)
	}
	return nil
}
