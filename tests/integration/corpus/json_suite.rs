//! JSONTestSuite's parsing files (`tests/corpora/jsontestsuite/`) against
//! the JSON reader: a `y_` file must parse, an `n_` file must be refused,
//! an `i_` file (either is allowed) must not panic.

use super::dir;

#[test]
fn json_test_suite_parses_y_refuses_n_and_survives_i() {
    let mut counts = [0; 3];
    let mut entries: Vec<_> = std::fs::read_dir(dir("jsontestsuite").join("test_parsing"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let parsed = json::parse_bytes(&std::fs::read(&path).unwrap());
        match &name[..2] {
            "y_" => {
                assert!(parsed.is_ok(), "{name} must parse: {parsed:?}");
                counts[0] += 1;
            }
            "n_" => {
                assert!(parsed.is_err(), "{name} must be refused: {parsed:?}");
                counts[1] += 1;
            }
            "i_" => counts[2] += 1,
            _ => panic!("{name}: not a y_, n_ or i_ file"),
        }
    }
    println!(
        "jsontestsuite: {} y_, {} n_, {} i_ files",
        counts[0], counts[1], counts[2]
    );
    assert!(counts.iter().sum::<i32>() > 0, "no file read");
}
