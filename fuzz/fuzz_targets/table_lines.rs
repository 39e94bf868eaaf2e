#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| gradflow_fuzz::table_lines(data));
