package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nektos/act/pkg/artifactcache"
	"github.com/nektos/act/pkg/common"
	log "github.com/sirupsen/logrus"
)

// cache-server: the cache shared by a group's runners. It speaks act's cache
// API (what actions/cache uses) on act's artifactcache.Storage, adding what
// act's handler lacks:
//   - only bearer tokens registered by a runner (POST /_internal/register with
//     the group's secret) may use the API, until revoked (POST /_internal/revoke);
//   - each token belongs to one repository, and sees and writes that
//     repository's entries only (a find from another repository misses, an
//     upload or commit into another repository's entry is refused with 403);
//   - downloads need no token but an unguessable URL (HMAC-signed, expiring).
//
// act's own Handler is not used here because it always listens on all
// interfaces without authentication: anyone reaching the Pod could bypass
// the checks above through it.
func cacheServerCmd(args []string) error {
	fs := flag.NewFlagSet("cache-server", flag.ContinueOnError)
	configFile := fs.String("config", "", "config file (cache.external_secret is required)")
	fs.StringVar(configFile, "c", "", "config file (short)")
	dir := fs.String("dir", "", "storage directory (default: cache.dir)")
	host := fs.String("host", "", "host written into download URLs (default: cache.host, else the outbound IP)")
	port := fs.Uint("port", 0, "port to listen on (default: cache.port)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := LoadConfig(*configFile)
	if err != nil {
		return err
	}
	setLogLevel(cfg.Log.Level)
	if cfg.Cache.ExternalSecret == "" {
		return errors.New("cache-server: cache.external_secret is not set in the config file; " +
			"refusing to serve a cache without authentication")
	}
	if *dir == "" {
		*dir = cfg.Cache.Dir
	}
	if *host == "" {
		*host = cfg.Cache.Host
	}
	if *host == "" {
		ip := common.GetOutboundIP()
		if ip == nil {
			return errors.New("cache-server: no --host given and no outbound IP address found")
		}
		*host = ip.String()
	}
	if *port == 0 {
		*port = uint(cfg.Cache.Port)
	}
	srv, err := NewCacheServer(*dir, cfg.Cache.ExternalSecret)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", *port))
	if err != nil {
		return err
	}
	srv.base = fmt.Sprintf("http://%s:%d", *host, ln.Addr().(*net.TCPAddr).Port)
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go srv.gcLoop(ctx)
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Infof("cache server is listening on %s (storage %s, download URLs %s)", ln.Addr(), *dir, srv.base)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("cache server: shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	return nil
}

const (
	cacheAPI        = "/_apis/artifactcache"
	downloadTTL     = time.Hour
	keepIncomplete  = time.Hour
	keepUnused      = 7 * 24 * time.Hour
	keepSuperseded  = 5 * time.Minute
	cacheGCInterval = 10 * time.Minute
)

// cacheEntry is one cache entry: act's Cache plus the repository owning it.
type cacheEntry struct {
	artifactcache.Cache
	Repo string `json:"repo"`
}

// CacheServer is the authenticating, repository-isolating cache API.
type CacheServer struct {
	secret  string
	base    string // http://host:port for download URLs
	storage *artifactcache.Storage
	index   string // path of the JSON index

	mu      sync.Mutex
	tokens  map[string]string // job token -> repository
	entries map[uint64]*cacheEntry
	nextID  uint64
}

// NewCacheServer opens (or creates) the storage in dir.
func NewCacheServer(dir, secret string) (*CacheServer, error) {
	storage, err := artifactcache.NewStorage(filepath.Join(dir, "cache"))
	if err != nil {
		return nil, err
	}
	s := &CacheServer{secret: secret, storage: storage, index: filepath.Join(dir, "index.json"),
		tokens: map[string]string{}, entries: map[uint64]*cacheEntry{}}
	if raw, err := os.ReadFile(s.index); err == nil {
		var saved struct {
			NextID  uint64        `json:"next_id"`
			Entries []*cacheEntry `json:"entries"`
		}
		if err := json.Unmarshal(raw, &saved); err != nil {
			return nil, fmt.Errorf("read cache index %s: %w", s.index, err)
		}
		s.nextID = saved.NextID
		for _, e := range saved.Entries {
			s.entries[e.ID] = e
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	return s, nil
}

// save writes the index; the caller holds s.mu.
func (s *CacheServer) save() error {
	saved := struct {
		NextID  uint64        `json:"next_id"`
		Entries []*cacheEntry `json:"entries"`
	}{NextID: s.nextID}
	for _, e := range s.entries {
		saved.Entries = append(saved.Entries, e)
	}
	b, err := json.Marshal(saved)
	if err != nil {
		return err
	}
	tmp := s.index + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.index)
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	if v == nil {
		w.WriteHeader(code)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// ServeHTTP routes and authenticates every request.
func (s *CacheServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	log.Debugf("cache server: %s %s", r.Method, r.URL.Path)
	path := r.URL.Path
	switch {
	case path == "/_internal/register" || path == "/_internal/revoke":
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "POST only")
			return
		}
		if subtle.ConstantTimeCompare([]byte(bearer(r)), []byte(s.secret)) != 1 {
			writeError(w, http.StatusUnauthorized, "wrong secret")
			return
		}
		s.internal(w, r, path == "/_internal/register")
		return
	case r.Method == http.MethodGet && strings.HasPrefix(path, cacheAPI+"/artifacts/"):
		s.download(w, r, strings.TrimPrefix(path, cacheAPI+"/artifacts/"))
		return
	case path != cacheAPI && !strings.HasPrefix(path, cacheAPI+"/"):
		writeError(w, http.StatusNotFound, "not found")
		return
	}
	s.mu.Lock()
	repo, ok := s.tokens[bearer(r)]
	s.mu.Unlock()
	if !ok || bearer(r) == "" {
		writeError(w, http.StatusUnauthorized, "unknown or revoked token")
		return
	}
	rest := strings.TrimPrefix(path, cacheAPI)
	switch {
	case r.Method == http.MethodGet && rest == "/cache":
		s.find(w, r, repo)
	case r.Method == http.MethodPost && rest == "/caches":
		s.reserve(w, r, repo)
	case r.Method == http.MethodPatch && strings.HasPrefix(rest, "/caches/"):
		s.upload(w, r, repo, strings.TrimPrefix(rest, "/caches/"))
	case r.Method == http.MethodPost && strings.HasPrefix(rest, "/caches/"):
		s.commit(w, r, repo, strings.TrimPrefix(rest, "/caches/"))
	case r.Method == http.MethodPost && rest == "/clean":
		writeJSON(w, http.StatusOK, nil)
	default:
		writeError(w, http.StatusNotFound, "not found")
	}
}

func (s *CacheServer) internal(w http.ResponseWriter, r *http.Request, register bool) {
	var body struct {
		Token string `json:"token"`
		Repo  string `json:"repo"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Token == "" || register && body.Repo == "" {
		writeError(w, http.StatusBadRequest, "want JSON {\"token\": ..., \"repo\": \"owner/name\"}")
		return
	}
	if register {
		s.allow(body.Token, body.Repo)
	} else {
		s.forbid(body.Token)
	}
	writeJSON(w, http.StatusOK, map[string]any{})
}

// allow lets token read and write repo's entries.
func (s *CacheServer) allow(token, repo string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[token] = strings.ToLower(repo)
	log.Debugf("cache server: token registered for %s (%d tokens)", repo, len(s.tokens))
}

// forbid revokes token.
func (s *CacheServer) forbid(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.tokens, token)
}

// find: the newest complete entry of the repository whose key equals one of
// the keys (in order), else starts with it, with the same version (act's rules).
func (s *CacheServer) find(w http.ResponseWriter, r *http.Request, repo string) {
	version := r.URL.Query().Get("version")
	var keys []string
	for _, k := range strings.Split(r.URL.Query().Get("keys"), ",") {
		if k = strings.ToLower(strings.TrimSpace(k)); k != "" {
			keys = append(keys, k)
		}
	}
	s.mu.Lock()
	var hit *cacheEntry
	for _, k := range keys {
		hit = s.newest(repo, version, func(key string) bool { return key == k })
		if hit == nil {
			hit = s.newest(repo, version, func(key string) bool { return strings.HasPrefix(key, k) })
		}
		if hit != nil {
			break
		}
	}
	if hit != nil {
		hit.UsedAt = time.Now().Unix()
		_ = s.save()
	}
	var found artifactcache.Cache
	if hit != nil {
		found = hit.Cache
	}
	s.mu.Unlock()
	if hit == nil {
		writeJSON(w, http.StatusNoContent, nil)
		return
	}
	if ok, err := s.storage.Exist(found.ID); err != nil || !ok {
		writeJSON(w, http.StatusNoContent, nil)
		return
	}
	exp := time.Now().Add(downloadTTL).Unix()
	writeJSON(w, http.StatusOK, map[string]any{
		"result":          "hit",
		"archiveLocation": fmt.Sprintf("%s%s/artifacts/%d?exp=%d&sig=%s", s.base, cacheAPI, found.ID, exp, s.sign(found.ID, exp)),
		"cacheKey":        found.Key,
	})
}

// newest is the newest complete entry of repo and version whose key matches;
// the caller holds s.mu.
func (s *CacheServer) newest(repo, version string, match func(string) bool) *cacheEntry {
	var best *cacheEntry
	for _, e := range s.entries {
		if e.Repo == repo && e.Complete && e.Version == version && match(e.Key) &&
			(best == nil || e.CreatedAt > best.CreatedAt || e.CreatedAt == best.CreatedAt && e.ID > best.ID) {
			best = e
		}
	}
	return best
}

func (s *CacheServer) reserve(w http.ResponseWriter, r *http.Request, repo string) {
	req := &artifactcache.Request{}
	if err := json.NewDecoder(r.Body).Decode(req); err != nil || req.Key == "" {
		writeError(w, http.StatusBadRequest, "want JSON {\"key\": ..., \"version\": ...}")
		return
	}
	req.Key = strings.ToLower(req.Key)
	c := req.ToCache()
	now := time.Now().Unix()
	c.CreatedAt, c.UsedAt = now, now
	s.mu.Lock()
	s.nextID++
	c.ID = s.nextID
	s.entries[c.ID] = &cacheEntry{Cache: *c, Repo: repo}
	err := s.save()
	s.mu.Unlock()
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"cacheId": c.ID})
}

// entryFor checks that id is an incomplete entry of repo; it answers the
// request itself when not.
func (s *CacheServer) entryFor(w http.ResponseWriter, repo, rawID string) (*cacheEntry, bool) {
	id, err := strconv.ParseUint(rawID, 10, 64)
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad cache id")
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[id]
	switch {
	case e == nil:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("cache %d: not reserved", id))
	case e.Repo != repo:
		writeError(w, http.StatusForbidden, fmt.Sprintf("cache %d belongs to another repository", id))
	case e.Complete:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("cache %d: already complete", id))
	default:
		return e, true
	}
	return nil, false
}

func (s *CacheServer) upload(w http.ResponseWriter, r *http.Request, repo, rawID string) {
	e, ok := s.entryFor(w, repo, rawID)
	if !ok {
		return
	}
	start, err := parseContentRange(r.Header.Get("Content-Range"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.storage.Write(e.ID, start, r.Body); err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, nil)
}

func (s *CacheServer) commit(w http.ResponseWriter, r *http.Request, repo, rawID string) {
	e, ok := s.entryFor(w, repo, rawID)
	if !ok {
		return
	}
	var body struct {
		Size int64 `json:"size"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	s.mu.Lock()
	size := e.Size
	s.mu.Unlock()
	if body.Size > 0 {
		size = body.Size
	}
	written, err := s.storage.Commit(e.ID, size)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	s.mu.Lock()
	e.Size, e.Complete, e.UsedAt = written, true, time.Now().Unix()
	err = s.save()
	s.mu.Unlock()
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, nil)
}

func (s *CacheServer) download(w http.ResponseWriter, r *http.Request, rawID string) {
	id, err := strconv.ParseUint(rawID, 10, 64)
	exp, expErr := strconv.ParseInt(r.URL.Query().Get("exp"), 10, 64)
	if err != nil || expErr != nil || time.Now().Unix() > exp ||
		!hmac.Equal([]byte(r.URL.Query().Get("sig")), []byte(s.sign(id, exp))) {
		writeError(w, http.StatusForbidden, "invalid or expired download URL")
		return
	}
	s.mu.Lock()
	e := s.entries[id]
	complete := e != nil && e.Complete
	if complete {
		e.UsedAt = time.Now().Unix()
	}
	s.mu.Unlock()
	if !complete {
		writeError(w, http.StatusNotFound, "no such cache entry")
		return
	}
	s.storage.Serve(w, r, id)
}

// sign is the download URL's signature: only the holder of the secret can make one.
func (s *CacheServer) sign(id uint64, exp int64) string {
	m := hmac.New(sha256.New, []byte(s.secret))
	fmt.Fprintf(m, "artifactcache-download:%d:%d", id, exp)
	return hex.EncodeToString(m.Sum(nil))
}

// parseContentRange reads the start of "bytes START-END/*".
func parseContentRange(s string) (int64, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "bytes ")
	start, _, ok := strings.Cut(s, "-")
	if !ok {
		return 0, fmt.Errorf("bad Content-Range %q", s)
	}
	n, err := strconv.ParseInt(start, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("bad Content-Range %q", s)
	}
	return n, nil
}

// gcLoop removes abandoned uploads, long-unused entries and entries superseded
// by a newer one with the same repository, key and version.
func (s *CacheServer) gcLoop(ctx context.Context) {
	t := time.NewTicker(cacheGCInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.gc(time.Now())
		}
	}
}

func (s *CacheServer) gc(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	newest := map[string]*cacheEntry{}
	for _, e := range s.entries {
		k := e.Repo + "\x00" + e.Key + "\x00" + e.Version
		if e.Complete && (newest[k] == nil || e.CreatedAt > newest[k].CreatedAt) {
			newest[k] = e
		}
	}
	removed := 0
	for id, e := range s.entries {
		k := e.Repo + "\x00" + e.Key + "\x00" + e.Version
		drop := !e.Complete && now.Sub(time.Unix(e.CreatedAt, 0)) > keepIncomplete ||
			e.Complete && now.Sub(time.Unix(e.UsedAt, 0)) > keepUnused ||
			e.Complete && newest[k] != e && now.Sub(time.Unix(e.CreatedAt, 0)) > keepSuperseded
		if drop {
			s.storage.Remove(id)
			delete(s.entries, id)
			removed++
		}
	}
	if removed > 0 {
		_ = s.save()
		log.Infof("cache server: removed %d cache entries", removed)
	}
}
