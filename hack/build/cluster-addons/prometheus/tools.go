//go:build tools

// Package tools names the commands hack/build/cluster-addons.sh builds, so go mod tidy pins their modules.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
)
