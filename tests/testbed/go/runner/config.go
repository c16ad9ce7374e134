package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/joho/godotenv"
	"gopkg.in/yaml.v3"
)

// Config is the runner's YAML configuration file. It accepts the keys of the
// official runner's config that this runner uses; unknown keys are ignored.
type Config struct {
	Log struct {
		Level string `yaml:"level"`
	} `yaml:"log"`
	Runner struct {
		File             string            `yaml:"file"`
		Capacity         int               `yaml:"capacity"`
		Envs             map[string]string `yaml:"envs"`
		EnvFile          string            `yaml:"env_file"`
		Timeout          time.Duration     `yaml:"timeout"`
		ShutdownTimeout  time.Duration     `yaml:"shutdown_timeout"`
		Insecure         bool              `yaml:"insecure"`
		FetchTimeout     time.Duration     `yaml:"fetch_timeout"`
		FetchInterval    time.Duration     `yaml:"fetch_interval"`
		FetchIntervalMax time.Duration     `yaml:"fetch_interval_max"`
		ReportInterval   time.Duration     `yaml:"report_interval"`
		Labels           []string          `yaml:"labels"`
	} `yaml:"runner"`
	Cache struct {
		Enabled        *bool  `yaml:"enabled"`
		Dir            string `yaml:"dir"`
		Host           string `yaml:"host"`
		Port           uint16 `yaml:"port"`
		ExternalServer string `yaml:"external_server"`
		ExternalSecret string `yaml:"external_secret"`
	} `yaml:"cache"`
	Container struct {
		Network       string        `yaml:"network"`
		Privileged    bool          `yaml:"privileged"`
		Options       string        `yaml:"options"`
		WorkdirParent string        `yaml:"workdir_parent"`
		ValidVolumes  []string      `yaml:"valid_volumes"`
		DockerHost    string        `yaml:"docker_host"`
		ForcePull     bool          `yaml:"force_pull"`
		ForceRebuild  bool          `yaml:"force_rebuild"`
		RequireDocker bool          `yaml:"require_docker"`
		DockerTimeout time.Duration `yaml:"docker_timeout"`
	} `yaml:"container"`
	Host struct {
		WorkdirParent string `yaml:"workdir_parent"`
	} `yaml:"host"`
}

// StateInterval is how often the task state is sent while a job runs: often
// enough that Gitea keeps the runner busy and online through a silent step.
const StateInterval = 5 * time.Second

// LoadConfig reads path (an empty path means: defaults only) and fills defaults.
func LoadConfig(path string) (*Config, error) {
	cfg := &Config{}
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read config file: %w", err)
		}
		if err := yaml.Unmarshal(raw, cfg); err != nil {
			return nil, fmt.Errorf("parse config file %s: %w", path, err)
		}
	}
	if cfg.Log.Level == "" {
		cfg.Log.Level = "info"
	}
	r := &cfg.Runner
	if r.File == "" {
		r.File = ".runner"
	}
	if r.Capacity <= 0 {
		r.Capacity = 1
	}
	if r.Timeout <= 0 {
		r.Timeout = 3 * time.Hour
	}
	if r.FetchTimeout <= 0 {
		r.FetchTimeout = 5 * time.Second
	}
	if r.FetchInterval <= 0 {
		r.FetchInterval = 2 * time.Second
	}
	if r.FetchIntervalMax <= 0 {
		r.FetchIntervalMax = 5 * time.Second
	}
	if r.FetchIntervalMax < r.FetchInterval {
		r.FetchIntervalMax = r.FetchInterval
	}
	if r.ReportInterval <= 0 {
		r.ReportInterval = time.Second
	}
	if r.Envs == nil {
		r.Envs = map[string]string{}
	}
	if r.EnvFile != "" {
		if _, err := os.Stat(r.EnvFile); err == nil {
			envs, err := godotenv.Read(r.EnvFile)
			if err != nil {
				return nil, fmt.Errorf("read env file %s: %w", r.EnvFile, err)
			}
			for k, v := range envs {
				r.Envs[k] = v
			}
		}
	}
	c := &cfg.Cache
	if c.Enabled == nil {
		on := true
		c.Enabled = &on
	}
	if c.Dir == "" {
		home, _ := os.UserHomeDir()
		c.Dir = filepath.Join(home, ".cache", "actcache")
	}
	if c.ExternalServer != "" && c.ExternalSecret == "" {
		return nil, errors.New("cache.external_server is set but cache.external_secret is empty: " +
			"the runner cannot register job tokens with the cache server without the shared secret")
	}
	k := &cfg.Container
	if k.WorkdirParent == "" {
		k.WorkdirParent = "workspace"
	}
	if cfg.Host.WorkdirParent == "" {
		home, _ := os.UserHomeDir()
		cfg.Host.WorkdirParent = filepath.Join(home, ".cache", "act")
	}
	return cfg, nil
}
