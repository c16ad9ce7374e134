package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Registration is the JSON file `register` writes and `daemon` reads.
type Registration struct {
	Warning   string   `json:"WARNING"`
	ID        int64    `json:"id"`
	UUID      string   `json:"uuid"`
	Name      string   `json:"name"`
	Token     string   `json:"token"`
	Address   string   `json:"address"`
	Labels    []string `json:"labels"`
	Ephemeral bool     `json:"ephemeral"`
}

const registrationWarning = "Written by gro-testbed-runner register and read by its daemon; " +
	"it holds the runner's secret token. Delete it to register a new runner."

// SaveRegistration writes the file with mode 0600 (it holds the runner token).
func SaveRegistration(path string, reg *Registration) error {
	reg.Warning = registrationWarning
	b, err := json.MarshalIndent(reg, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// LoadRegistration reads the file written by SaveRegistration.
func LoadRegistration(path string) (*Registration, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("registration file not found (%s), please register the runner first", path)
	} else if err != nil {
		return nil, fmt.Errorf("read registration file: %w", err)
	}
	reg := &Registration{}
	if err := json.Unmarshal(raw, reg); err != nil {
		return nil, fmt.Errorf("parse registration file %s: %w", path, err)
	}
	return reg, nil
}
