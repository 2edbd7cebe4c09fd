package dedup_test

// testSource is the EventBridge source the tests' events carry (the
// library has no default: a team names its own).
const testSource = "com.example.test"
