package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestCacheServerIsolation(t *testing.T) {
	cs, err := NewCacheServer(t.TempDir(), "secret")
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(cs)
	defer ts.Close()
	cs.base = ts.URL
	call := func(method, path, token, body string, hdr ...string) (int, string) {
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	expect := func(what string, got, want int) {
		t.Helper()
		if got != want {
			t.Errorf("%s: status %d, want %d", what, got, want)
		}
	}
	code, _ := call("GET", "/_apis/artifactcache/cache", "", "")
	expect("no token", code, 401)
	code, _ = call("POST", "/_internal/register", "wrong", `{"token":"a","repo":"o/a"}`)
	expect("register with a wrong secret", code, 401)
	for _, r := range []string{`{"token":"a","repo":"o/a"}`, `{"token":"b","repo":"o/b"}`} {
		code, _ = call("POST", "/_internal/register", "secret", r)
		expect("register", code, 200)
	}
	code, body := call("POST", "/_apis/artifactcache/caches", "a", `{"key":"K","version":"v"}`)
	expect("reserve", code, 200)
	var reserved struct {
		CacheID uint64 `json:"cacheId"`
	}
	if err := json.Unmarshal([]byte(body), &reserved); err != nil || reserved.CacheID == 0 {
		t.Fatalf("reserve answered %q", body)
	}
	id := fmt.Sprintf("/_apis/artifactcache/caches/%d", reserved.CacheID)
	code, _ = call("PATCH", id, "b", "x", "Content-Range", "bytes 0-0/*")
	expect("upload into another repository's entry", code, 403)
	code, _ = call("PATCH", id, "a", "data", "Content-Range", "bytes 0-3/*")
	expect("upload", code, 200)
	code, _ = call("POST", id, "b", `{"size":4}`)
	expect("commit of another repository's entry", code, 403)
	code, _ = call("POST", id, "a", `{"size":4}`)
	expect("commit", code, 200)
	code, _ = call("GET", "/_apis/artifactcache/cache?keys=k&version=v", "b", "")
	expect("find from another repository", code, 204)
	code, body = call("GET", "/_apis/artifactcache/cache?keys=k&version=v", "a", "")
	expect("find", code, 200)
	var hit struct{ ArchiveLocation string }
	_ = json.Unmarshal([]byte(body), &hit)
	if !strings.HasPrefix(hit.ArchiveLocation, ts.URL+"/_apis/artifactcache/artifacts/") {
		t.Fatalf("archiveLocation %q", hit.ArchiveLocation)
	}
	code, body = call("GET", strings.TrimPrefix(hit.ArchiveLocation, ts.URL), "", "")
	if code != 200 || body != "data" {
		t.Errorf("download: %d %q", code, body)
	}
	loc := strings.TrimPrefix(hit.ArchiveLocation, ts.URL)
	last := "0"
	if strings.HasSuffix(loc, "0") {
		last = "1"
	}
	code, _ = call("GET", loc[:len(loc)-1]+last, "", "")
	expect("download with a wrong signature", code, 403)
	code, _ = call("POST", "/_internal/revoke", "secret", `{"token":"a"}`)
	expect("revoke", code, 200)
	code, _ = call("GET", "/_apis/artifactcache/cache?keys=k&version=v", "a", "")
	expect("find after revoke", code, 401)
}
