//! The configuration loader must answer any file with a configuration or with located errors,
//! never a panic: arbitrary bytes as YAML, and (from the seed corpus of real configurations)
//! arbitrary field values. A file that loads is also compiled into the decision core's model,
//! as the daemon and the simulator do.
//!
//! Corpus: `fuzz/corpus/config` (the shipped configurations, the simulator's test
//! configurations, and `fleet_sync.yaml`, which reaches every rule of the `fleet:` section).

#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use spillway_control::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    match Config::from_yaml(Path::new("fuzz.yaml"), text) {
        Ok(c) => {
            let _ = c.to_model();
            let _ = c.advanced_topology();
            let _ = c.fleet_sync();
            let _ = c.table_file();
        }
        Err(e) => {
            // Every error renders, and names where it is when it has a place.
            let _ = e.to_string();
        }
    }
});
