package outbox

// Fenced reports whether this build adds the home actions (false under the
// outbox_unfenced tag), for the external tests.
const Fenced = fenced
