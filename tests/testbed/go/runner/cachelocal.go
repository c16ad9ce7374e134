package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/nektos/act/pkg/common"
	log "github.com/sirupsen/logrus"
)

// LocalCache is the daemon's own cache server (cache.enabled without
// cache.external_server): the same authenticated, repository-isolating server
// as `cache-server`, in-process, with job tokens registered directly.
type LocalCache struct {
	srv *CacheServer
	hs  *http.Server
}

// StartLocalCache listens on cache.port (0: any free port) on all interfaces, so
// job containers reach it at cache.host (default: the outbound IP address).
func StartLocalCache(cfg *Config) (*LocalCache, error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	srv, err := NewCacheServer(cfg.Cache.Dir, hex.EncodeToString(secret))
	if err != nil {
		return nil, err
	}
	host := cfg.Cache.Host
	if host == "" {
		ip := common.GetOutboundIP()
		if ip == nil {
			return nil, errors.New("no cache.host given and no outbound IP address found")
		}
		host = ip.String()
	}
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", cfg.Cache.Port))
	if err != nil {
		return nil, err
	}
	srv.base = fmt.Sprintf("http://%s:%d", host, ln.Addr().(*net.TCPAddr).Port)
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Error("cache server stopped")
		}
	}()
	log.Infof("cache server is listening on %s (storage %s)", srv.base, cfg.Cache.Dir)
	return &LocalCache{srv: srv, hs: hs}, nil
}

// Register implements JobCache.
func (l *LocalCache) Register(_ context.Context, token, repo string) error {
	if token == "" || repo == "" {
		return errors.New("the task has no runtime token or repository")
	}
	l.srv.allow(token, repo)
	return nil
}

// Revoke implements JobCache.
func (l *LocalCache) Revoke(_ context.Context, token string) error {
	l.srv.forbid(token)
	return nil
}

// URL implements JobCache.
func (l *LocalCache) URL() string { return l.srv.base + "/" }

// Close stops the server.
func (l *LocalCache) Close() error { return l.hs.Close() }
