// Compiled with the tests' precompiled header so the object library that carries it has one
// source that uses it (CMake needs that to share it with REUSE_FROM).
