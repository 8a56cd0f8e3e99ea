//go:build tools

// Package tools names the command hack/build/jaeger.sh builds, so go mod tidy pins its modules.
package tools

import (
	_ "github.com/jaegertracing/jaeger/cmd/jaeger"
)
