// The seed's Greeter service, written with the Restate Go SDK.
// Run: ./run.sh (port 9080, or PORT), then register http://localhost:9080 with Keel.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	restate "github.com/restatedev/sdk-go"
	"github.com/restatedev/sdk-go/server"
)

type Greeter struct{}

func (Greeter) Greet(ctx restate.Context, name string) (string, error) {
	// The UUID comes from the context so a replay sees the same one.
	greetingID := restate.UUID(ctx).String()
	if err := restate.RunVoid(ctx, func(restate.RunContext) error {
		notify(fmt.Sprintf("Notification %s %s", greetingID, name))
		return nil
	}, restate.WithName("Notification")); err != nil {
		return "", err
	}
	if err := restate.Sleep(ctx, time.Second); err != nil {
		return "", err
	}
	if err := restate.RunVoid(ctx, func(restate.RunContext) error {
		notify(fmt.Sprintf("Reminder %s %s", greetingID, name))
		return nil
	}, restate.WithName("Reminder")); err != nil {
		return "", err
	}
	return fmt.Sprintf("You said hi to %s!", name), nil
}

// notify prints line and appends it to RECORD_FILE when set.
func notify(line string) {
	fmt.Println(line)
	if path := os.Getenv("RECORD_FILE"); path != "" {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			log.Printf("record: %v", err)
			return
		}
		defer f.Close()
		f.WriteString(line + "\n")
	}
}

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "9080"
	}
	// Reflect names each handler after its method: Greet.
	if err := server.NewRestate().Bind(restate.Reflect(Greeter{})).Start(context.Background(), ":"+port); err != nil {
		log.Fatal(err)
	}
}
