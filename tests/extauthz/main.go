// extauthz: a real external authorizer for pier's tests (tests/ext_auth.rs) and manual
// (docs/src/edge/ext-auth.md). One decision, two protocols:
//
//   - gRPC: Envoy's envoy.service.auth.v3.Authorization/Check, served by go-control-plane's
//     generated server (over h2c);
//   - HTTP: the request pier forwards (method, prefixed path, headers, body), answered 200 to
//     allow or with its own status, headers and body to deny.
//
// The decision: `authorization: Bearer good` is allowed and the upstream request gets
// `x-user: alice`; `Bearer slow` is answered after -slow (a slow authorizer); `Bearer
// garbage` is answered with bytes that are not the protocol's (HTTP: not HTTP; gRPC: a
// message that is not a CheckResponse); anything else is denied with 403 (HTTP: with a body
// and `x-denied-by: extauthz`), or 401 when there is no authorization header at all. The
// authorizer echoes what it saw of the request in `x-seen-*` headers (allowed requests) so
// the tests can check what pier sent: the path, the body's length and first bytes, and the
// headers it was given.
//
// It prints `grpc=<addr> http=<addr>` on one line once both listen.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

var slow = flag.Duration("slow", 30*time.Second, "how long `Bearer slow` waits")

type verdict int

const (
	allow verdict = iota
	deny
	missing
	slowly
	garbage
)

func decide(authorization string) verdict {
	switch authorization {
	case "Bearer good":
		return allow
	case "Bearer slow":
		return slowly
	case "Bearer garbage":
		return garbage
	case "":
		return missing
	}
	return deny
}

// === gRPC ===

type server struct{}

func (server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	h := req.GetAttributes().GetRequest().GetHttp()
	v := decide(h.GetHeaders()["authorization"])
	if v == slowly {
		select {
		case <-time.After(*slow):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		v = allow
	}
	switch v {
	case allow:
		body := h.GetBody()
		if body == "" {
			body = string(h.GetRawBody())
		}
		names := make([]string, 0, len(h.GetHeaders()))
		for k := range h.GetHeaders() {
			names = append(names, k)
		}
		sort.Strings(names)
		return &authv3.CheckResponse{
			Status: &status.Status{Code: 0},
			HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
				Headers: []*corev3.HeaderValueOption{
					header("x-user", "alice"),
					header("x-seen-path", h.GetPath()),
					header("x-seen-method", h.GetMethod()),
					header("x-seen-body-length", strconv.Itoa(len(body))),
					header("x-seen-headers", strings.Join(names, ",")),
				},
				HeadersToRemove: []string{"x-remove-me"},
			}},
		}, nil
	case garbage:
		// Marked for the codec, which sends bytes that are not a CheckResponse.
		meta, _ := structpb.NewStruct(map[string]any{"garbage": true})
		return &authv3.CheckResponse{DynamicMetadata: meta}, nil
	}
	code := typev3.StatusCode_Forbidden
	if v == missing {
		code = typev3.StatusCode_Unauthorized
	}
	return &authv3.CheckResponse{
		Status: &status.Status{Code: 7, Message: "denied"},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: code},
			Headers: []*corev3.HeaderValueOption{header("x-denied-by", "extauthz")},
			Body:    "denied by extauthz\n",
		}},
	}, nil
}

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, Value: v}}
}

// codec is gRPC's proto codec, except for a CheckResponse marked `garbage`: its bytes are
// not a valid protobuf message.
type codec struct{}

func (codec) Marshal(v any) ([]byte, error) {
	if r, ok := v.(*authv3.CheckResponse); ok && r.GetDynamicMetadata().GetFields()["garbage"] != nil {
		return []byte{0xff, 0xff, 0xff, 0xff, 0x0f, 'n', 'o', 't', ' ', 'p', 'r', 'o', 't', 'o'}, nil
	}
	return proto.Marshal(v.(proto.Message))
}

func (codec) Unmarshal(data []byte, v any) error { return proto.Unmarshal(data, v.(proto.Message)) }
func (codec) Name() string                       { return "proto" }

var _ encoding.Codec = codec{}

// === HTTP ===

func serveHTTP(w http.ResponseWriter, r *http.Request) {
	v := decide(r.Header.Get("authorization"))
	if v == slowly {
		select {
		case <-time.After(*slow):
		case <-r.Context().Done():
			return
		}
		v = allow
	}
	switch v {
	case allow:
		body, _ := io.ReadAll(r.Body)
		names := make([]string, 0, len(r.Header))
		for k := range r.Header {
			names = append(names, strings.ToLower(k))
		}
		sort.Strings(names)
		w.Header().Set("x-user", "alice")
		w.Header().Set("x-seen-path", r.URL.RequestURI())
		w.Header().Set("x-seen-method", r.Method)
		w.Header().Set("x-seen-host", r.Host)
		w.Header().Set("x-seen-body-length", strconv.Itoa(len(body)))
		w.Header().Set("x-seen-content-length", strconv.FormatInt(r.ContentLength, 10))
		w.Header().Set("x-seen-headers", strings.Join(names, ","))
		w.WriteHeader(http.StatusOK)
	case garbage:
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		buf.WriteString("\x00\x01 this is not HTTP \xff\r\n\r\n")
		buf.Flush()
		conn.Close()
	case missing:
		w.Header().Set("www-authenticate", `Bearer realm="extauthz"`)
		w.Header().Set("x-denied-by", "extauthz")
		w.WriteHeader(http.StatusUnauthorized)
		io.WriteString(w, "who are you?\n")
	default:
		w.Header().Set("x-denied-by", "extauthz")
		w.Header().Set("content-type", "text/plain")
		w.WriteHeader(http.StatusForbidden)
		io.WriteString(w, "denied by extauthz\n")
	}
}

func main() {
	grpcAddr := flag.String("grpc", "127.0.0.1:0", "gRPC (h2c) listen address")
	httpAddr := flag.String("http", "127.0.0.1:0", "HTTP listen address")
	version := flag.Bool("version", false, "print the version and exit")
	flag.Parse()
	if *version {
		fmt.Println("extauthz " + Version)
		return
	}
	gl, err := net.Listen("tcp", *grpcAddr)
	if err != nil {
		log.Fatal(err)
	}
	hl, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		log.Fatal(err)
	}
	g := grpc.NewServer(grpc.ForceServerCodec(codec{}))
	authv3.RegisterAuthorizationServer(g, server{})
	go func() { log.Fatal(g.Serve(gl)) }()
	go func() { log.Fatal(http.Serve(hl, http.HandlerFunc(serveHTTP))) }()
	fmt.Printf("grpc=%s http=%s\n", gl.Addr(), hl.Addr())
	os.Stdout.Sync()
	select {}
}
