//! The `spillwayctl simulate` scenario loader must answer any scenario file with its steps or
//! with located errors, never a panic: arbitrary bytes as YAML, and arbitrary values in real
//! scenarios (the seed corpus). Each step is checked against a fixed model as `simulate` does
//! before it runs anything (packet steps built, traffic steps checked); nothing is run.
//!
//! Corpus: `fuzz/corpus/scenario` (the simulator's test scenarios).

#![no_main]

use std::path::Path;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use spillway_control::config::Config;
use spillway_control::simulate::check_scenario;
use spillway_core::model::Model;

/// The model of one of the simulator tests' configurations (one service, two backends).
fn model() -> &'static Model {
    static M: OnceLock<Model> = OnceLock::new();
    M.get_or_init(|| {
        let text = include_str!("../../control/tests/scenarios/configs/two.yaml");
        Config::from_yaml(Path::new("two.yaml"), text).expect("two.yaml is valid").to_model()
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Err(e) = check_scenario(Path::new("fuzz.yaml"), text, model()) {
        let _ = e.to_string();
    }
});
