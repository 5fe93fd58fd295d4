//! The messages of Envoy's `envoy.service.auth.v3.Authorization/Check` that pier sends and
//! reads, written by hand with prost's derive. Only the fields pier uses are declared: prost
//! skips the others on decode, and proto3 lets a sender leave fields out.
//!
//! Field numbers from envoyproxy/data-plane-api: `envoy/service/auth/v3/external_auth.proto`
//! (CheckRequest, CheckResponse, OkHttpResponse, DeniedHttpResponse),
//! `envoy/service/auth/v3/attribute_context.proto` (AttributeContext and its Peer, Request,
//! HttpRequest), `envoy/config/core/v3/base.proto` (HeaderValue, HeaderValueOption),
//! `envoy/config/core/v3/address.proto` (Address, SocketAddress), `envoy/type/v3/http_status.proto`
//! (HttpStatus), and googleapis `google/rpc/status.proto` (Status). A wrong number here would
//! be a silent misread; `tests` pins each against bytes encoded by hand.

use std::collections::HashMap;

/// `envoy.service.auth.v3.CheckRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CheckRequest {
    #[prost(message, optional, tag = "1")]
    pub attributes: Option<AttributeContext>,
}

/// `envoy.service.auth.v3.AttributeContext`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeContext {
    #[prost(message, optional, tag = "1")]
    pub source: Option<Peer>,
    #[prost(message, optional, tag = "2")]
    pub destination: Option<Peer>,
    #[prost(message, optional, tag = "4")]
    pub request: Option<Request>,
}

/// `AttributeContext.Peer`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Peer {
    #[prost(message, optional, tag = "1")]
    pub address: Option<Address>,
    #[prost(string, tag = "4")]
    pub principal: String,
}

/// `envoy.config.core.v3.Address` (only `socket_address`, field 1 of its oneof).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Address {
    #[prost(message, optional, tag = "1")]
    pub socket_address: Option<SocketAddress>,
}

/// `envoy.config.core.v3.SocketAddress` (`port_value` is field 3 of its oneof).
#[derive(Clone, PartialEq, prost::Message)]
pub struct SocketAddress {
    #[prost(string, tag = "2")]
    pub address: String,
    #[prost(uint32, tag = "3")]
    pub port_value: u32,
}

/// `AttributeContext.Request`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    #[prost(message, optional, tag = "2")]
    pub http: Option<HttpRequest>,
}

/// `AttributeContext.HttpRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpRequest {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(string, tag = "2")]
    pub method: String,
    /// Lower-case names; a header sent several times: its values joined by `,` (as Envoy).
    #[prost(map = "string, string", tag = "3")]
    pub headers: HashMap<String, String>,
    /// The path with its query, as Envoy sends it.
    #[prost(string, tag = "4")]
    pub path: String,
    #[prost(string, tag = "5")]
    pub host: String,
    #[prost(string, tag = "6")]
    pub scheme: String,
    /// The body's length (`-1`: unknown).
    #[prost(int64, tag = "9")]
    pub size: i64,
    #[prost(string, tag = "10")]
    pub protocol: String,
    /// The body, when it is UTF-8 (a proto3 `string` must be).
    #[prost(string, tag = "11")]
    pub body: String,
    /// The body, when it is not UTF-8.
    #[prost(bytes = "vec", tag = "12")]
    pub raw_body: Vec<u8>,
}

/// `envoy.service.auth.v3.CheckResponse` (`http_response` is a oneof of 2, 3 and 5).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CheckResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<RpcStatus>,
    #[prost(message, optional, tag = "2")]
    pub denied_response: Option<DeniedHttpResponse>,
    #[prost(message, optional, tag = "3")]
    pub ok_response: Option<OkHttpResponse>,
    /// `error_response`: sent with a non-OK status, read like a denial.
    #[prost(message, optional, tag = "5")]
    pub error_response: Option<DeniedHttpResponse>,
}

/// `google.rpc.Status` (its `details` are not read).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

/// `envoy.service.auth.v3.OkHttpResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct OkHttpResponse {
    #[prost(message, repeated, tag = "2")]
    pub headers: Vec<HeaderValueOption>,
    #[prost(string, repeated, tag = "5")]
    pub headers_to_remove: Vec<String>,
}

/// `envoy.service.auth.v3.DeniedHttpResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeniedHttpResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<HttpStatus>,
    #[prost(message, repeated, tag = "2")]
    pub headers: Vec<HeaderValueOption>,
    #[prost(string, tag = "3")]
    pub body: String,
}

/// `envoy.type.v3.HttpStatus` (its `code` is the enum `StatusCode`, numbered as HTTP).
#[derive(Clone, PartialEq, prost::Message)]
pub struct HttpStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
}

/// `envoy.config.core.v3.HeaderValueOption`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HeaderValueOption {
    #[prost(message, optional, tag = "1")]
    pub header: Option<HeaderValue>,
    /// `google.protobuf.BoolValue append` (deprecated, still sent by older authorizers).
    #[prost(message, optional, tag = "2")]
    pub append: Option<BoolValue>,
    /// `HeaderAppendAction`: 0 append if exists or add, 1 add if absent, 2 overwrite if exists
    /// or add, 3 overwrite if exists.
    #[prost(int32, tag = "3")]
    pub append_action: i32,
}

/// `envoy.config.core.v3.HeaderValue` (`value`, or `raw_value` bytes).
#[derive(Clone, PartialEq, prost::Message)]
pub struct HeaderValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
    #[prost(bytes = "vec", tag = "3")]
    pub raw_value: Vec<u8>,
}

/// `google.protobuf.BoolValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BoolValue {
    #[prost(bool, tag = "1")]
    pub value: bool,
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    /// Field numbers pinned against bytes written from the .proto files by hand: tag byte =
    /// field number << 3 | wire type (0 varint, 2 length-delimited).
    #[test]
    fn check_request_fields_are_envoys() {
        let req = CheckRequest {
            attributes: Some(AttributeContext {
                request: Some(Request {
                    http: Some(HttpRequest {
                        method: "GET".into(),
                        path: "/a".into(),
                        size: 1,
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            }),
        };
        let bytes = req.encode_to_vec();
        // attributes(1) { request(4) { http(2) { method(2) "GET", path(4) "/a", size(9) 1 } } }
        let http = [0x12, 3, b'G', b'E', b'T', 0x22, 2, b'/', b'a', 0x48, 1];
        let mut want = vec![0x0a, 15, 0x22, 13, 0x12, 11];
        want.extend_from_slice(&http);
        assert_eq!(bytes, want);
    }

    #[test]
    fn check_response_fields_are_envoys() {
        // status(1) { code(1) 7 }, denied_response(2) { status(1) { code(1) 401 },
        // headers(2) { header(1) { key(1) "a", value(2) "b" } }, body(3) "no" }
        let bytes = [
            0x0a, 2, 0x08, 7, //
            0x12, 19, 0x0a, 3, 0x08, 0x91, 0x03, //
            0x12, 8, 0x0a, 6, 0x0a, 1, b'a', 0x12, 1, b'b', //
            0x1a, 2, b'n', b'o',
        ];
        let r = CheckResponse::decode(&bytes[..]).unwrap();
        assert_eq!(r.status.unwrap().code, 7);
        let d = r.denied_response.unwrap();
        assert_eq!(d.status.unwrap().code, 401);
        assert_eq!(d.headers[0].header.as_ref().unwrap().key, "a");
        assert_eq!(d.headers[0].header.as_ref().unwrap().value, "b");
        assert_eq!(d.body, "no");
        // ok_response(3) { headers(2) { header(1) { key "k", value "v" }, append_action(3) 2 },
        // headers_to_remove(5) "x" }
        let bytes = [
            0x1a, 15, 0x12, 10, 0x0a, 6, 0x0a, 1, b'k', 0x12, 1, b'v', 0x18, 2, 0x2a, 1, b'x',
        ];
        let r = CheckResponse::decode(&bytes[..]).unwrap();
        let ok = r.ok_response.unwrap();
        assert_eq!(ok.headers[0].append_action, 2);
        assert_eq!(ok.headers_to_remove, ["x"]);
    }
}
