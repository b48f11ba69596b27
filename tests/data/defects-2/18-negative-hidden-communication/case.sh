# A collective entirely exposed hides nothing: 0, never a negative time, in text and JSON.
expect 0 'exposed \(compute stream idle\), 0[.0]* [a-z]*s hidden behind compute' -- simulate s.yaml
expect 0 '"hidden_communication_seconds": 0(\.0)?,' -- simulate s.yaml --json
check "no negative time in the report" bash -c "! '$bin' simulate s.yaml | grep -E -- '-0\.0|-[0-9.]+ [mun]?s\b'"
