//! joiner-aws.
