package console_test

import (
	"testing"

	"github.com/tidings-go/tidings/internal/pgtest"
)

func TestMain(m *testing.M) {
	pgtest.Main(m)
}
