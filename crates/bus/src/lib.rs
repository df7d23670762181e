//! The NATS JetStream adapter: the whole message topology and the stage runner.
