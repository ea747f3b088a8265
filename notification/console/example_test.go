package console_test

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"os/signal"

	"github.com/tidings-go/tidings/notification"
	"github.com/tidings-go/tidings/notification/console"
)

// Mount the console on the service's own mux, behind the service's own
// authentication.
func ExampleNew() {
	db := exampleDB()
	client, err := notification.NewClient(db, nil)
	if err != nil {
		panic(err)
	}
	ops, err := console.New(client, &console.Options{
		BasePath: "/ops/tidings",
		Secret:   []byte(os.Getenv("CONSOLE_SECRET")), // shared by the replicas; 32 bytes or more
	})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/tidings/", requireOperator(ops))
	panic(http.ListenAndServe(":8080", mux))
}

// A quick look at a database's requests from the machine it runs on:
// read-only, on loopback, until Ctrl-C.
func ExampleServeLocal() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	db := exampleDB()
	defer db.Close()
	err := console.ServeLocal(ctx, db, &console.LocalConfig{
		Console:       console.Options{ReadOnly: true},
		Port:          8089,
		ListeningFunc: func(url string) { fmt.Println("open", url) },
	})
	if err != nil {
		panic(err)
	}
}

func exampleDB() *sql.DB {
	db, err := sql.Open("postgres", os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	return db
}

// requireOperator stands for the service's own authentication: here, a
// user and password given in OPS_CREDENTIALS ("user:password").
func requireOperator(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, password, ok := r.BasicAuth()
		want := os.Getenv("OPS_CREDENTIALS")
		if !ok || want == "" || subtle.ConstantTimeCompare([]byte(user+":"+password), []byte(want)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="operators"`)
			http.Error(w, "operators only", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
