package main

import (
	"fmt"
	"strings"
)

// Label is one runner label: "name", "name:host" or "name:docker://image".
type Label struct {
	Name   string
	Schema string // "host" or "docker"
	Arg    string // the image for docker
}

// ParseLabel splits a label at its first colon. A bare name means host.
func ParseLabel(s string) (Label, error) {
	name, rest, found := strings.Cut(strings.TrimSpace(s), ":")
	l := Label{Name: name, Schema: "host"}
	if !found {
		return l, nil
	}
	schema, arg, _ := strings.Cut(rest, "://")
	switch schema {
	case "host":
		return l, nil
	case "docker":
		l.Schema, l.Arg = "docker", arg
		return l, nil
	}
	return l, fmt.Errorf("unsupported schema: %s", schema)
}

// ParseLabels parses every label, failing on the first bad one.
func ParseLabels(labels []string) ([]Label, error) {
	out := make([]Label, 0, len(labels))
	for _, s := range labels {
		l, err := ParseLabel(s)
		if err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, nil
}

// Names returns the label names, the only part Gitea is told.
func Names(labels []Label) []string {
	out := make([]string, 0, len(labels))
	for _, l := range labels {
		out = append(out, l.Name)
	}
	return out
}

// Platform is the value act's Platforms map takes for the label: the image,
// or "-self-hosted" for act's host mode.
func (l Label) Platform() string {
	if l.Schema == "docker" {
		return l.Arg
	}
	return "-self-hosted"
}

// SplitLabels splits a comma-separated --labels value, dropping empty items.
func SplitLabels(s string) []string {
	var out []string
	for _, l := range strings.Split(s, ",") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}
