// The cross-SDK test services (test/sdks/CONTRACT.md), written with the Restate Go SDK.
// Handlers are registered by name (not by reflection) so their names match the contract's camelCase.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	restate "github.com/restatedev/sdk-go"
	"github.com/restatedev/sdk-go/server"
)

type Void = restate.Void

var (
	bumpMu sync.Mutex
	bumps  = map[string]int{}
)

func bump(name string) int {
	bumpMu.Lock()
	defer bumpMu.Unlock()
	bumps[name]++
	return bumps[name]
}

func record(line string) {
	path := os.Getenv("RECORD_FILE")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		log.Printf("record: %v", err)
		return
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		log.Printf("record: %v", err)
	}
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// ---- Counter ----

func add(ctx restate.ObjectContext, n int64) (int64, error) {
	count, err := restate.Get[int64](ctx, "count")
	if err != nil {
		return 0, err
	}
	count += n
	restate.Set(ctx, "count", count)
	return count, nil
}

type setReq struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

func counter() restate.ServiceDefinition {
	return restate.NewObject("Counter").
		Handler("add", restate.NewObjectHandler(add)).
		Handler("get", restate.NewObjectSharedHandler(func(ctx restate.ObjectSharedContext, _ Void) (int64, error) {
			return restate.Get[int64](ctx, "count")
		})).
		Handler("set", restate.NewObjectHandler(func(ctx restate.ObjectContext, req setReq) (Void, error) {
			restate.Set(ctx, req.Key, req.Value)
			return Void{}, nil
		})).
		Handler("read", restate.NewObjectSharedHandler(func(ctx restate.ObjectSharedContext, key string) (json.RawMessage, error) {
			// An unset key leaves the RawMessage nil, which marshals as null.
			return restate.Get[json.RawMessage](ctx, key)
		})).
		Handler("keys", restate.NewObjectSharedHandler(func(ctx restate.ObjectSharedContext, _ Void) ([]string, error) {
			keys, err := restate.Keys(ctx)
			if err != nil {
				return nil, err
			}
			keys = append([]string{}, keys...) // [] rather than null when empty
			sort.Strings(keys)
			return keys, nil
		})).
		Handler("clear", restate.NewObjectHandler(func(ctx restate.ObjectContext, key string) (Void, error) {
			restate.Clear(ctx, key)
			return Void{}, nil
		})).
		Handler("clearAll", restate.NewObjectHandler(func(ctx restate.ObjectContext, _ Void) (Void, error) {
			restate.ClearAll(ctx)
			return Void{}, nil
		})).
		Handler("addThenFail", restate.NewObjectHandler(func(ctx restate.ObjectContext, n int64) (Void, error) {
			if _, err := add(ctx, n); err != nil {
				return Void{}, err
			}
			return Void{}, restate.ToTerminalError(fmt.Errorf("failed after add %d", n), restate.WithErrorCode(400))
		})).
		Handler("failThenAdd", restate.NewObjectHandler(func(ctx restate.ObjectContext, n int64) (int64, error) {
			if k := bump("failThenAdd:" + restate.Key(ctx)); k < 3 {
				return 0, fmt.Errorf("retryable %d", k)
			}
			return add(ctx, n)
		}))
}

// ---- ListObject ----

func listObject() restate.ServiceDefinition {
	getList := func(ctx restate.ObjectSharedContext) ([]string, error) {
		list, err := restate.Get[[]string](ctx, "list")
		if list == nil {
			list = []string{}
		}
		return list, err
	}
	return restate.NewObject("ListObject").
		Handler("append", restate.NewObjectHandler(func(ctx restate.ObjectContext, v string) ([]string, error) {
			list, err := getList(ctx)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
			restate.Set(ctx, "list", list)
			return list, nil
		})).
		Handler("get", restate.NewObjectSharedHandler(func(ctx restate.ObjectSharedContext, _ Void) ([]string, error) {
			return getList(ctx)
		}))
}

// ---- Proxy ----

type proxyReq struct {
	Service        string          `json:"service"`
	Key            *string         `json:"key"`
	Handler        string          `json:"handler"`
	Input          json.RawMessage `json:"input"`
	DelayMs        *int64          `json:"delayMs"`
	IdempotencyKey *string         `json:"idempotencyKey"`
}

// client targets the request's handler. The binary codec passes the input's JSON bytes through
// unchanged and takes the callee's output as bytes (an empty output does not fail to decode).
func (r proxyReq) client(ctx restate.Context) restate.Client[any, []byte] {
	if r.Key != nil {
		return restate.Object[[]byte](ctx, r.Service, *r.Key, r.Handler, restate.WithBinary)
	}
	return restate.Service[[]byte](ctx, r.Service, r.Handler, restate.WithBinary)
}

func (r proxyReq) input() []byte {
	if r.Input == nil {
		return []byte{}
	}
	return r.Input
}

func (r proxyReq) requestFuture(ctx restate.Context) restate.ResponseFuture[[]byte] {
	var opts []restate.RequestOption
	if r.IdempotencyKey != nil {
		opts = append(opts, restate.WithIdempotencyKey(*r.IdempotencyKey))
	}
	return r.client(ctx).RequestFuture(r.input(), opts...)
}

func (r proxyReq) send(ctx restate.Context) {
	var opts []restate.SendOption
	if r.IdempotencyKey != nil {
		opts = append(opts, restate.WithIdempotencyKey(*r.IdempotencyKey))
	}
	if r.DelayMs != nil {
		opts = append(opts, restate.WithDelay(ms(*r.DelayMs)))
	}
	r.client(ctx).Send(r.input(), opts...)
}

// asJSON returns the callee's output as this handler's JSON output; an empty output becomes null.
func asJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return b
}

type manyReq struct {
	Req    proxyReq `json:"req"`
	OneWay bool     `json:"oneWay"`
}

func proxy() restate.ServiceDefinition {
	return restate.NewService("Proxy").
		Handler("call", restate.NewServiceHandler(func(ctx restate.Context, req proxyReq) (json.RawMessage, error) {
			out, err := req.requestFuture(ctx).Response()
			if err != nil {
				return nil, err
			}
			return asJSON(out), nil
		})).
		Handler("send", restate.NewServiceHandler(func(ctx restate.Context, req proxyReq) (Void, error) {
			req.send(ctx)
			return Void{}, nil
		})).
		Handler("manyCalls", restate.NewServiceHandler(func(ctx restate.Context, reqs []manyReq) (Void, error) {
			var calls []restate.Future
			for _, r := range reqs {
				if r.OneWay {
					r.Req.send(ctx)
				} else {
					calls = append(calls, r.Req.requestFuture(ctx))
				}
			}
			for fut, err := range restate.Wait(ctx, calls...) {
				if err != nil {
					return Void{}, err
				}
				if _, err := fut.(restate.ResponseFuture[[]byte]).Response(); err != nil {
					return Void{}, err
				}
			}
			return Void{}, nil
		})).
		Handler("cancel", restate.NewServiceHandler(func(ctx restate.Context, id string) (Void, error) {
			restate.CancelInvocation(ctx, id)
			return Void{}, nil
		}))
}

// ---- Sleeper ----

type sleepReq struct {
	Ms  int64   `json:"ms"`
	Tag *string `json:"tag"`
}

func sleeper() restate.ServiceDefinition {
	step := func(ctx restate.Context, name, line string) error {
		return restate.RunVoid(ctx, func(restate.RunContext) error {
			record(line)
			return nil
		}, restate.WithName(name))
	}
	return restate.NewService("Sleeper").
		Handler("sleep", restate.NewServiceHandler(func(ctx restate.Context, req sleepReq) (Void, error) {
			if req.Tag != nil {
				if err := step(ctx, "before", *req.Tag+":before"); err != nil {
					return Void{}, err
				}
			}
			if err := restate.Sleep(ctx, ms(req.Ms)); err != nil {
				return Void{}, err
			}
			if req.Tag != nil {
				if err := step(ctx, "after", *req.Tag+":after"); err != nil {
					return Void{}, err
				}
			}
			return Void{}, nil
		})).
		Handler("sleepMany", restate.NewServiceHandler(func(ctx restate.Context, durations []int64) (Void, error) {
			var futs []restate.Future
			for _, d := range durations {
				futs = append(futs, restate.After(ctx, ms(d)))
			}
			for fut, err := range restate.Wait(ctx, futs...) {
				if err != nil {
					return Void{}, err
				}
				if err := fut.(restate.AfterFuture).Done(); err != nil {
					return Void{}, err
				}
			}
			return Void{}, nil
		}))
}

// ---- Awaiter ----

func heldAwakeable(ctx restate.Context, key string) restate.AwakeableFuture[string] {
	awk := restate.Awakeable[string](ctx)
	restate.ObjectSend(ctx, "AwakeableHolder", key, "hold").Send(awk.Id())
	return awk
}

type awakeableReq struct {
	Key       string `json:"key"`
	TimeoutMs *int64 `json:"timeoutMs"`
}

type callOrTimeoutReq struct {
	SleepMs   int64 `json:"sleepMs"`
	TimeoutMs int64 `json:"timeoutMs"`
}

type allReq struct {
	Key     string `json:"key"`
	SleepMs int64  `json:"sleepMs"`
}

type resolveReq struct {
	ID    string `json:"id"`
	Value string `json:"value"`
}

type rejectReq struct {
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

func awaiter() restate.ServiceDefinition {
	return restate.NewService("Awaiter").
		Handler("awakeable", restate.NewServiceHandler(func(ctx restate.Context, req awakeableReq) (string, error) {
			awk := heldAwakeable(ctx, req.Key)
			if req.TimeoutMs != nil {
				timeout := restate.After(ctx, ms(*req.TimeoutMs))
				first, err := restate.WaitFirst(ctx, awk, timeout)
				if err != nil {
					return "", err
				}
				if first == timeout {
					return "timeout", nil
				}
			}
			return awk.Result()
		})).
		Handler("callOrTimeout", restate.NewServiceHandler(func(ctx restate.Context, req callOrTimeoutReq) (string, error) {
			call := restate.Service[Void](ctx, "Sleeper", "sleep").RequestFuture(sleepReq{Ms: req.SleepMs})
			timeout := restate.After(ctx, ms(req.TimeoutMs))
			first, err := restate.WaitFirst(ctx, call, timeout)
			if err != nil {
				return "", err
			}
			if first == timeout {
				return "timeout", nil
			}
			if _, err := call.Response(); err != nil {
				return "", err
			}
			return "call", nil
		})).
		Handler("all", restate.NewServiceHandler(func(ctx restate.Context, req allReq) (string, error) {
			awk := heldAwakeable(ctx, req.Key)
			add := restate.Object[int64](ctx, "Counter", req.Key, "add").RequestFuture(1)
			timer := restate.After(ctx, ms(req.SleepMs))
			for _, err := range restate.Wait(ctx, awk, add, timer) {
				if err != nil {
					return "", err
				}
			}
			value, err := awk.Result()
			if err != nil {
				return "", err
			}
			count, err := add.Response()
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("%s|%d", value, count), nil
		})).
		Handler("resolve", restate.NewServiceHandler(func(ctx restate.Context, req resolveReq) (Void, error) {
			restate.ResolveAwakeable(ctx, req.ID, req.Value)
			return Void{}, nil
		})).
		Handler("reject", restate.NewServiceHandler(func(ctx restate.Context, req rejectReq) (Void, error) {
			restate.RejectAwakeable(ctx, req.ID, errors.New(req.Reason))
			return Void{}, nil
		}))
}

// ---- AwakeableHolder ----

func awakeableHolder() restate.ServiceDefinition {
	return restate.NewObject("AwakeableHolder").
		Handler("hold", restate.NewObjectHandler(func(ctx restate.ObjectContext, id string) (Void, error) {
			restate.Set(ctx, "id", id)
			return Void{}, nil
		})).
		Handler("get", restate.NewObjectSharedHandler(func(ctx restate.ObjectSharedContext, _ Void) (*string, error) {
			return restate.Get[*string](ctx, "id")
		}))
}

// ---- Signals ----

type signalWaitReq struct {
	Name string `json:"name"`
}

type signalSendReq struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Value string `json:"value"`
}

type signalRejectReq struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Reason string `json:"reason"`
}

func signals() restate.ServiceDefinition {
	return restate.NewService("Signals").
		Handler("wait", restate.NewServiceHandler(func(ctx restate.Context, req signalWaitReq) (string, error) {
			return restate.Signal[string](ctx, req.Name).Result()
		})).
		Handler("send", restate.NewServiceHandler(func(ctx restate.Context, req signalSendReq) (Void, error) {
			restate.ResolveSignal(ctx, req.ID, req.Name, req.Value)
			return Void{}, nil
		})).
		Handler("reject", restate.NewServiceHandler(func(ctx restate.Context, req signalRejectReq) (Void, error) {
			restate.RejectSignal(ctx, req.ID, req.Name, errors.New(req.Reason))
			return Void{}, nil
		}))
}

// ---- Failing ----

type terminalReq struct {
	Message  string            `json:"message"`
	Code     *uint16           `json:"code"`
	Metadata map[string]string `json:"metadata"`
}

func failing() restate.ServiceDefinition {
	return restate.NewService("Failing").
		Handler("terminal", restate.NewServiceHandler(func(ctx restate.Context, req terminalReq) (Void, error) {
			var opts []restate.TerminalErrorOption
			if req.Code != nil {
				opts = append(opts, restate.WithErrorCode(restate.Code(*req.Code)))
			}
			if req.Metadata != nil {
				opts = append(opts, restate.WithMetadataMap(req.Metadata))
			}
			return Void{}, restate.ToTerminalError(errors.New(req.Message), opts...)
		}))
}

// ---- Runner ----

type retryReq struct {
	Tag      string `json:"tag"`
	Failures int    `json:"failures"`
}

type exhaustedReq struct {
	Tag         string `json:"tag"`
	MaxAttempts uint   `json:"maxAttempts"`
}

type tagReq struct {
	Tag string `json:"tag"`
}

func runner() restate.ServiceDefinition {
	return restate.NewService("Runner").
		Handler("retry", restate.NewServiceHandler(func(ctx restate.Context, req retryReq) (int, error) {
			k, err := restate.Run(ctx, func(restate.RunContext) (int, error) {
				record(req.Tag + ":run")
				k := bump("run:" + req.Tag)
				if k <= req.Failures {
					return 0, fmt.Errorf("flaky %d", k)
				}
				return k, nil
			}, restate.WithName("flaky"),
				restate.WithInitialRetryInterval(10*time.Millisecond),
				restate.WithMaxRetryAttempts(uint(req.Failures+3)))
			if err != nil {
				return 0, err
			}
			if bump("handler:"+req.Tag) == 1 {
				return 0, errors.New("replay after the run")
			}
			return k, nil
		})).
		Handler("exhausted", restate.NewServiceHandler(func(ctx restate.Context, req exhaustedReq) (Void, error) {
			return Void{}, restate.RunVoid(ctx, func(restate.RunContext) error {
				record(req.Tag + ":run")
				return errors.New("always fails")
			}, restate.WithName("always"),
				restate.WithInitialRetryInterval(10*time.Millisecond),
				restate.WithMaxRetryAttempts(req.MaxAttempts))
		})).
		Handler("terminal", restate.NewServiceHandler(func(ctx restate.Context, req tagReq) (Void, error) {
			return Void{}, restate.RunVoid(ctx, func(restate.RunContext) error {
				record(req.Tag + ":run")
				return restate.ToTerminalError(errors.New("terminal in run"), restate.WithErrorCode(409))
			}, restate.WithName("terminal"))
		})).
		Handler("countRuns", restate.NewServiceHandler(func(ctx restate.Context, n int) (int, error) {
			count := 0
			for i := 0; i < n; i++ {
				err := restate.RunVoid(ctx, func(restate.RunContext) error {
					count++
					return nil
				}, restate.WithName(fmt.Sprintf("inc %d", i)))
				if err != nil {
					return 0, err
				}
			}
			return count, nil
		}))
}

// ---- NonDeterministic ----

// nonDeterministic runs a (first attempt) or b (later attempts), so the replay after the
// forced retry meets a journal that does not match.
func nonDeterministic(name string, a, b func(ctx restate.ObjectContext) error) restate.ObjectHandlerFn[Void, string] {
	return func(ctx restate.ObjectContext, _ Void) (string, error) {
		key := restate.Key(ctx)
		k := bump(name + ":" + key)
		step := b
		if k == 1 {
			step = a
		}
		if err := step(ctx); err != nil {
			return "", err
		}
		if err := restate.Sleep(ctx, 20*time.Millisecond); err != nil {
			return "", err
		}
		if k == 1 {
			return "", errors.New("force a replay")
		}
		restate.ObjectSend(ctx, "Counter", key, "add").Send(1)
		return "never", nil
	}
}

func callCounter(handler string) func(restate.ObjectContext) error {
	return func(ctx restate.ObjectContext) error {
		_, err := restate.Object[json.RawMessage](ctx, "Counter", restate.Key(ctx), handler).Request(Void{})
		return err
	}
}

func sendCounter(handler string) func(restate.ObjectContext) error {
	return func(ctx restate.ObjectContext) error {
		restate.ObjectSend(ctx, "Counter", restate.Key(ctx), handler).Send(Void{})
		return nil
	}
}

func setState(key string) func(restate.ObjectContext) error {
	return func(ctx restate.ObjectContext) error {
		restate.Set(ctx, key, 1)
		return nil
	}
}

func nonDeterministicObject() restate.ServiceDefinition {
	return restate.NewObject("NonDeterministic").
		Handler("eitherSleepOrCall", restate.NewObjectHandler(nonDeterministic("eitherSleepOrCall",
			func(ctx restate.ObjectContext) error { return restate.Sleep(ctx, 10*time.Millisecond) },
			callCounter("get")))).
		Handler("callDifferentMethod", restate.NewObjectHandler(nonDeterministic("callDifferentMethod",
			callCounter("get"), callCounter("keys")))).
		Handler("sendDifferentTarget", restate.NewObjectHandler(nonDeterministic("sendDifferentTarget",
			sendCounter("get"), sendCounter("keys")))).
		Handler("setDifferentKey", restate.NewObjectHandler(nonDeterministic("setDifferentKey",
			setState("a"), setState("b"))))
}

// ---- Echo ----

func echo() restate.ServiceDefinition {
	return restate.NewService("Echo").
		Handler("headers", restate.NewServiceHandler(func(ctx restate.Context, _ Void) (map[string]string, error) {
			headers := map[string]string{}
			for name, value := range ctx.Request().Headers.Iter() {
				headers[strings.ToLower(name)] = value
			}
			return headers, nil
		})).
		Handler("raw", restate.NewServiceHandler(func(ctx restate.Context, in []byte) ([]byte, error) {
			return in, nil
		}, restate.WithBinary))
}

// ---- Signup ----

func signup() restate.ServiceDefinition {
	return restate.NewWorkflow("Signup").
		Handler("run", restate.NewWorkflowHandler(func(ctx restate.WorkflowContext, name string) (string, error) {
			id := restate.Key(ctx)
			if err := restate.RunVoid(ctx, func(restate.RunContext) error {
				record(id + ":create")
				return nil
			}, restate.WithName("create")); err != nil {
				return "", err
			}
			restate.Set(ctx, "status", "waiting")
			approval, err := restate.Promise[string](ctx, "approval").Result()
			if err != nil {
				return "", err
			}
			restate.Set(ctx, "status", "approved")
			return name + ":" + approval, nil
		})).
		Handler("approve", restate.NewWorkflowSharedHandler(func(ctx restate.WorkflowSharedContext, value string) (Void, error) {
			return Void{}, restate.Promise[string](ctx, "approval").Resolve(value)
		})).
		Handler("status", restate.NewWorkflowSharedHandler(func(ctx restate.WorkflowSharedContext, _ Void) (*string, error) {
			return restate.Get[*string](ctx, "status")
		}))
}

func main() {
	port := os.Getenv("PORT")
	if port == "" {
		port = "9080"
	}
	srv := server.NewRestate().
		Bind(counter()).
		Bind(listObject()).
		Bind(proxy()).
		Bind(sleeper()).
		Bind(awaiter()).
		Bind(awakeableHolder()).
		Bind(signals()).
		Bind(failing()).
		Bind(runner()).
		Bind(nonDeterministicObject()).
		Bind(echo()).
		Bind(signup())
	if key := os.Getenv("IDENTITY_KEY"); key != "" {
		srv = srv.WithIdentityV1(key)
	}
	if err := srv.Start(context.Background(), "127.0.0.1:"+port); err != nil {
		log.Fatal(err)
	}
}
