// Fused mode's compiles off the recording thread: a pending graph whose program
// is not in the cache is compiled by one background thread while its ops run
// one by one; later cuts of the same graph find the program in the cache.
#pragma once

#include <optional>
#include <string>

#include "ir/graph.h"

namespace tpu::engine {

// Whether a cut may run its graph op by op instead of waiting for a compile
// (TORCH_TPU_FUSED_BACKGROUND_COMPILE; unset: on except on XLA:CPU).
bool background_compile_enabled();

// Queues `graph` (fingerprint given) for compilation into the runtime's cache.
// `ops` names its ops for an error message; `device` is where its failure is
// reported. True when the graph is queued now or was already; false at exit,
// when nothing is compiled in the background any more.
bool compile_in_background(ir::Graph&& graph, const ir::Fingerprint& fingerprint, std::string ops, int device);

// The first background compile failure for `device` not yet reported, as a
// message naming the graph's ops; taken once.
std::optional<std::string> take_background_error(int device);

// Fault injection (tests): the next background compile fails with `message`
// instead of compiling.
void inject_background_compile_failure(std::string message);

// Waits until every queued compile has finished (tests, torch_tpu.wait_for_compiles()).
void drain_background_compiles();

// At exit: drops the queued compiles and waits for the one in progress; none starts
// after. Runs from Python's exit hooks, before any static of the plugin is destroyed
// (a C atexit hook, the fallback, runs after the statics the plugin made later than
// its registration, which a compile in progress may still be using).
void stop_background_compiles();

}  // namespace tpu::engine
