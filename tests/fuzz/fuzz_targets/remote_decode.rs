//! The remote protocol's decoders on arbitrary bytes, as a hostile peer would send them: a
//! client's request as `ferrohsm-server` reads it (decoded, every field checked against its
//! limit, its mechanism parsed by its family), and a server's answer as the module's client
//! reads it. None may panic or allocate past the bytes it holds (libFuzzer's `-rss_limit_mb`
//! and `-malloc_limit_mb` catch the second); what decodes must encode back to a message that
//! decodes to the same encoding (no field read one way and written another).
#![no_main]

use ferrohsm::remote::proto::{self, Request, Response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = proto::decode::<Request>(data) {
        let encoded = proto::encode(&request).expect("a decoded request encodes");
        let again =
            proto::decode::<Request>(&encoded).unwrap_or_else(|_| panic!("a request's encoding decodes"));
        assert_eq!(
            proto::encode(&again).unwrap(),
            encoded,
            "a request's encoding is stable"
        );
        if request.check().is_ok() {
            if let Some(m) = request.mechanism() {
                let _ = m.clone().parse();
            }
        }
    }
    if let Ok(response) = proto::decode::<Response>(data) {
        let encoded = proto::encode(&response).expect("a decoded response encodes");
        let again =
            proto::decode::<Response>(&encoded).unwrap_or_else(|_| panic!("a response's encoding decodes"));
        assert_eq!(again, response, "a response decodes to what was encoded");
    }
});
