package faults_test

import (
	"testing"

	"github.com/tidings-go/tidings/internal/pgtest"
)

func TestMain(m *testing.M) {
	if runChild() {
		return
	}
	pgtest.Main(m)
}
