//! Load and failure bench for tether-server (written next).

fn main() {}
