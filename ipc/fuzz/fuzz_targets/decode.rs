#![no_main]
//! Fuzz the frame decoder and the message decoders behind it: any bytes must give frames or a
//! typed error, never a panic or an allocation of a claimed size.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    hanzo_ipc::fuzzing::decode_everything(data);
});
