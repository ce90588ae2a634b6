#include "distributed/bindings.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/utils/pybind.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <string>
#include <utility>
#include <vector>

#include "engine/config.h"
#include "engine/metrics.h"
#include "engine/runtime.h"
#include "engine/trace.h"

namespace tpu::distributed {
namespace {

using Tensors = std::vector<at::Tensor>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

// How a reduction runs on the host: gloo has no AVG or PREMUL_SUM, so those
// sum on the host and scale on the device (before for PREMUL_SUM, after for AVG).
struct Reduction {
  c10d::ReduceOp host_op;
  // PREMUL_SUM's factor: the caller's tensor, or a CPU scalar tensor for a number
  // (read by value, so it costs no transfer).
  std::optional<at::Tensor> pre_factor;
  int64_t divisor = 1;  // AVG: the group size

  // The factor for multiplying `t`: a device tensor factor moves to t's device.
  at::Tensor factor_for(const at::Tensor& t) const {
    const at::Tensor& f = *pre_factor;
    return f.is_cpu() && f.dim() == 0 ? f : f.to(t.device());
  }
};

Reduction plan_reduction(const c10d::ReduceOp& op, int size) {
  Reduction r;
  switch (op.op_) {
    case c10d::ReduceOp::AVG:
      r.host_op = c10d::ReduceOp::SUM;
      r.divisor = size;
      break;
    case c10d::ReduceOp::PREMUL_SUM: {
      r.host_op = c10d::ReduceOp::SUM;
      // NCCLPreMulSumSupplement: the name torch 2.11 has too (2.13 aliases it)
      auto* supplement = dynamic_cast<c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(supplement != nullptr, "tpu_dist: PREMUL_SUM without a factor");
      r.pre_factor = supplement->tensor_factor.defined() ? supplement->tensor_factor
                                                          : at::scalar_tensor(supplement->double_factor, at::kDouble);
      break;
    }
    default:
      r.host_op = op;
  }
  return r;
}

// A point-to-point transfer in flight on the host backend. A send or receive
// must not block when it is posted (each rank posts its send before its
// receive in a ring exchange), so the host copy travels with the Work, and a
// receive is copied into the caller's tensors when the Work is waited on.
class StagedWork final : public c10d::Work {
 public:
  StagedWork(WorkPtr host_work, Tensors host, Tensors targets, c10d::OpType type)
      : Work(-1, type), host_work_(std::move(host_work)), host_(std::move(host)), targets_(std::move(targets)) {}

  bool wait(std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_) {
      host_work_->wait(timeout);
      for (size_t i = 0; i < targets_.size(); ++i) targets_[i].copy_(host_[i]);
      done_ = true;
    }
    return true;
  }
  bool isCompleted() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  bool isSuccess() const override { return host_work_->isSuccess(); }
  int sourceRank() const override { return host_work_->sourceRank(); }
  std::vector<at::Tensor> result() override { return targets_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    wait(std::chrono::milliseconds(0));  // 0: no timeout
    auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    future->markCompleted(c10::IValue(targets_));
    return future;
  }

 private:
  std::mutex mutex_;
  bool done_ = false;
  WorkPtr host_work_;
  Tensors host_;
  Tensors targets_;  // tpu tensors a receive writes; empty for a send
};

// Every collective of this process in flight: a device synchronize
// (torch.tpu.synchronize(), torch.accelerator.synchronize()) waits for them, as
// CUDA's waits for NCCL's stream. Not from a collective's own completion, which
// would wait for itself.
thread_local bool t_completing = false;

struct Outstanding {
  std::mutex mutex;
  std::vector<c10::intrusive_ptr<c10::ivalue::Future>> futures;

  static Outstanding& get() {
    static auto* outstanding = [] {
      auto* o = new Outstanding();  // never freed: a synchronize may run at exit
      engine::Runtime::add_synchronize_wait([o] { o->wait_all(); });
      return o;
    }();
    return *outstanding;
  }
  void add(c10::intrusive_ptr<c10::ivalue::Future> future) {
    std::lock_guard<std::mutex> lock(mutex);
    std::erase_if(futures, [](const auto& f) { return f->completed(); });
    futures.push_back(std::move(future));
  }
  void wait_all() {
    if (t_completing) return;
    std::vector<c10::intrusive_ptr<c10::ivalue::Future>> all;
    {
      std::lock_guard<std::mutex> lock(mutex);
      all.swap(futures);
    }
    for (auto& f : all) f->wait();  // a failure is raised by its Work's wait()
  }
};

// What a failed collective tells its caller beyond the host backend's error: the
// collective, its number in the group, and where the other ranks are. Each rank
// whose collective fails writes its number to the group's store and reads the
// others' for a short while: a rank that wrote nothing has exited or is not in a
// collective (it stopped calling, or waits in another group).
class FailureReport {
 public:
  FailureReport(c10::intrusive_ptr<c10d::Store> store, int rank, int size)
      : store_(std::move(store)), rank_(rank), size_(size) {}

  [[noreturn]] void raise(const char* op, uint64_t number, const std::string& error) const {
    std::string message = std::string("tpu_dist: ") + op + " (collective #" + std::to_string(number) +
                          " of this group, on rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                          ") failed: " + error;
    if (store_) message += "\n" + others(number);
    C10_THROW_ERROR(DistBackendError, message);
  }

 private:
  static std::string key(int rank) { return "tpu_dist_failed/" + std::to_string(rank); }

  std::string others(uint64_t number) const {
    constexpr auto kGrace = std::chrono::seconds(2);
    std::vector<std::string> reported;
    std::vector<int> missing;
    try {
      std::string mine = std::to_string(number);
      store_->set(key(rank_), std::vector<uint8_t>(mine.begin(), mine.end()));
      for (int r = 0; r < size_; ++r)
        if (r != rank_) missing.push_back(r);
      auto deadline = std::chrono::steady_clock::now() + kGrace;
      while (!missing.empty()) {
        std::erase_if(missing, [&](int r) {
          if (!store_->check({key(r)})) return false;
          std::vector<uint8_t> value = store_->get(key(r));
          reported.push_back("rank " + std::to_string(r) + " at #" + std::string(value.begin(), value.end()));
          return true;
        });
        if (missing.empty() || std::chrono::steady_clock::now() >= deadline) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    } catch (const std::exception& e) {
      return std::string("(the group's store did not answer for a desync report: ") + e.what() + ")";
    }
    std::string s = "Ranks whose collective failed too: ";
    for (size_t i = 0; i < reported.size(); ++i) s += (i ? ", " : "") + reported[i];
    if (reported.empty()) s += "none";
    s += ". Ranks that did not arrive (exited, or not in a collective of this group within 2 s): ";
    for (size_t i = 0; i < missing.size(); ++i) s += (i ? ", " : "") + std::to_string(missing[i]);
    if (missing.empty()) s += "none";
    return s + ".";
  }

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, size_;
};

// The collective a backend method is running on this thread (set by Traced).
thread_local const char* t_collective = "collective";

// A collective in flight (HostStagedBackend::in_flight): done when `future` is,
// whose value is the output tensors. Waiting raises the collective's error (the
// host backend's, e.g. a peer that died or timed out), as NCCL's Work does.
class InFlightWork final : public c10d::Work {
 public:
  InFlightWork(c10::intrusive_ptr<c10::ivalue::Future> future, c10d::OpType type)
      : Work(-1, type), future_(std::move(future)) {}

  // The host backend applies the group's timeout to its part; a finer one is not kept.
  bool wait(std::chrono::milliseconds /*timeout*/) override {
    future_->waitAndThrow();
    return true;
  }
  bool isCompleted() override { return future_->completed(); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override { return future_->hasError() ? future_->exception_ptr() : nullptr; }
  std::vector<at::Tensor> result() override { return future_->value().toTensorVector(); }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class HostStagedBackend final : public c10d::Backend {
 public:
  HostStagedBackend(c10::intrusive_ptr<c10d::Backend> host, c10::intrusive_ptr<c10d::Store> store, int rank,
                    int size)
      : Backend(rank, size), host_(std::move(host)),
        failure_(std::make_shared<FailureReport>(std::move(store), rank, size)) {
    TORCH_CHECK(host_, "tpu_dist: no host backend to stage collectives through");
  }

  const std::string getBackendName() const override { return "tpu_dist"; }

  WorkPtr broadcast(Tensors& tensors, const c10d::BroadcastOptions& opts) override {
    Traced traced("broadcast", tensors);
    check_tpu(tensors, "broadcast");
    if (size_ == 1) return finished(tensors, true);
    after_in_flight(tensors);
    Tensors host = to_host(tensors);
    bool receives = rank_ != opts.rootRank;
    return in_flight(host_->broadcast(host, opts), tensors, [tensors, host, receives]() mutable {
      if (receives) copy_back(tensors, host);
    });
  }

  WorkPtr allreduce(Tensors& tensors, const c10d::AllreduceOptions& opts) override {
    return reduced_everywhere(tensors, opts, "allreduce",
                              [&](Tensors& host, const auto& o) { return host_->allreduce(host, o); });
  }

  WorkPtr allreduce_coalesced(Tensors& tensors, const c10d::AllreduceCoalescedOptions& opts) override {
    return reduced_everywhere(tensors, opts, "allreduce_coalesced",
                              [&](Tensors& host, const auto& o) { return host_->allreduce_coalesced(host, o); });
  }

  WorkPtr reduce(Tensors& tensors, const c10d::ReduceOptions& opts) override {
    Traced traced("reduce", tensors);
    check_tpu(tensors, "reduce");
    const Reduction r = plan_reduction(opts.reduceOp, size_);
    after_in_flight(tensors);
    Tensors host = to_host(tensors, &r);
    c10d::ReduceOptions host_opts = opts;
    host_opts.reduceOp = r.host_op;
    bool root = rank_ == opts.rootRank;
    int64_t divisor = r.divisor;
    return in_flight(host_->reduce(host, host_opts), tensors, [tensors, host, root, divisor]() mutable {
      if (root) copy_back(tensors, host, divisor);
    });
  }

  WorkPtr allgather(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::AllgatherOptions& opts) override {
    return gathered_lists(outputs, inputs, "allgather", [&](std::vector<Tensors>& out, Tensors& in) {
      return host_->allgather(out, in, opts);
    });
  }

  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override {
    Traced traced("_allgather_base", {input});
    return gather_into(output, input, opts);
  }

  WorkPtr allgather_into_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::AllgatherOptions& opts) override {
    return pairwise(outputs, inputs, "allgather_into_tensor_coalesced",
                    [&](at::Tensor& out, at::Tensor& in) { return gather_into(out, in, opts); });
  }

  WorkPtr gather(std::vector<Tensors>& outputs, Tensors& inputs, const c10d::GatherOptions& opts) override {
    return gathered_lists(outputs, inputs, "gather", [&](std::vector<Tensors>& out, Tensors& in) {
      return host_->gather(out, in, opts);
    });
  }

  WorkPtr scatter(Tensors& outputs, std::vector<Tensors>& inputs, const c10d::ScatterOptions& opts) override {
    Traced traced("scatter", outputs);
    check_tpu(outputs, "scatter");
    for (auto& list : inputs) check_tpu(list, "scatter");
    after_in_flight(outputs);
    std::vector<Tensors> host_in;
    for (auto& list : inputs) after_in_flight(list), host_in.push_back(to_host(list));
    Tensors host_out = host_like(outputs);
    return in_flight(host_->scatter(host_out, host_in, opts), outputs,
                     [outputs, host_out]() mutable { copy_back(outputs, host_out); });
  }

  // Reduce-scatter goes through an allreduce of the whole input on the host
  // (each rank then keeps its part): it needs no reduce-scatter from the host
  // backend, at the cost of host bandwidth, which staging spends anyway.
  WorkPtr reduce_scatter(Tensors& outputs, std::vector<Tensors>& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    check_tpu(outputs, "reduce_scatter");
    Traced traced("reduce_scatter", outputs);
    TORCH_CHECK(outputs.size() == inputs.size(), "tpu_dist: reduce_scatter got ", outputs.size(), " outputs for ",
                inputs.size(), " input lists");
    const Reduction r = plan_reduction(opts.reduceOp, size_);
    std::vector<WorkPtr> works;
    {
      OneCount batch;
      for (size_t i = 0; i < outputs.size(); ++i) {
        check_tpu(inputs[i], "reduce_scatter");
        TORCH_CHECK(static_cast<int>(inputs[i].size()) == size_, "tpu_dist: reduce_scatter needs ", size_,
                    " inputs per output (one per rank), got ", inputs[i].size());
        Tensors out{outputs[i]};
        after_in_flight(out);
        after_in_flight(inputs[i]);
        Tensors host = to_host(inputs[i], &r);
        c10d::AllreduceCoalescedOptions host_opts;
        host_opts.reduceOp = r.host_op;
        host_opts.timeout = opts.timeout;
        Tensors mine{host[rank_]};
        int64_t divisor = r.divisor;
        works.push_back(in_flight(host_->allreduce_coalesced(host, host_opts), out,
                                  [out, mine, divisor]() mutable { copy_back(out, mine, divisor); }));
      }
    }
    count_collective();
    return all_of(works, outputs);
  }

  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override {
    Traced traced("_reduce_scatter_base", {input});
    return scatter_reduced(output, input, opts);
  }

  WorkPtr reduce_scatter_tensor_coalesced(Tensors& outputs, Tensors& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    return pairwise(outputs, inputs, "reduce_scatter_tensor_coalesced",
                    [&](at::Tensor& out, at::Tensor& in) { return scatter_reduced(out, in, opts); });
  }

  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                        std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) override {
    Traced traced("alltoall_base", {input});
    Tensors in{input}, out{output};
    check_tpu(in, "alltoall_base");
    check_tpu(out, "alltoall_base");
    after_in_flight(in);
    after_in_flight(out);
    Tensors host_in = to_host(in);
    Tensors host_out = host_like(out);
    return in_flight(host_->alltoall_base(host_out[0], host_in[0], output_splits, input_splits, opts), out,
                     [out, host_out]() mutable { copy_back(out, host_out); });
  }

  // A list all-to-all is one flat all-to-all of the concatenated tensors, split
  // by element counts.
  WorkPtr alltoall(Tensors& outputs, Tensors& inputs, const c10d::AllToAllOptions& opts) override {
    Traced traced("alltoall", inputs);
    check_tpu(inputs, "alltoall");
    check_tpu(outputs, "alltoall");
    TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
                "tpu_dist: alltoall needs one input and one output per rank (", size_, "), got ", inputs.size(),
                " and ", outputs.size());
    std::vector<int64_t> in_splits, out_splits;
    Tensors flat_in;
    for (const auto& t : inputs) {
      TORCH_CHECK(t.scalar_type() == inputs[0].scalar_type(), "tpu_dist: alltoall inputs differ in dtype (",
                  t.scalar_type(), " and ", inputs[0].scalar_type(), ")");
      flat_in.push_back(t.reshape({-1}));
      in_splits.push_back(t.numel());
    }
    int64_t out_numel = 0;
    for (const auto& t : outputs) {
      out_splits.push_back(t.numel());
      out_numel += t.numel();
    }
    after_in_flight(inputs);
    after_in_flight(outputs);
    Tensors host_in{at::cat(to_host(flat_in))};
    at::Tensor host_out = at::empty({out_numel}, outputs[0].options().device(at::kCPU));
    return in_flight(host_->alltoall_base(host_out, host_in[0], out_splits, in_splits, opts), outputs,
                     [outputs, host_out]() mutable {
                       int64_t offset = 0;
                       for (auto& t : outputs) {
                         t.copy_(host_out.narrow(0, offset, t.numel()).view(t.sizes()));
                         offset += t.numel();
                       }
                     });
  }

  WorkPtr send(Tensors& tensors, int dst_rank, int tag) override {
    check_tpu(tensors, "send");
    after_in_flight(tensors);
    Tensors host = to_host(tensors);
    add_collective_metrics();
    return c10::make_intrusive<StagedWork>(host_->send(host, dst_rank, tag), host, Tensors{}, c10d::OpType::SEND);
  }

  WorkPtr recv(Tensors& tensors, int src_rank, int tag) override {
    check_tpu(tensors, "recv");
    after_in_flight(tensors);
    Tensors host = host_like(tensors);
    add_collective_metrics();
    return c10::make_intrusive<StagedWork>(host_->recv(host, src_rank, tag), host, tensors, c10d::OpType::RECV);
  }

  WorkPtr recvAnysource(Tensors& tensors, int tag) override {
    check_tpu(tensors, "recv");
    Tensors host = host_like(tensors);
    add_collective_metrics();
    return c10::make_intrusive<StagedWork>(host_->recvAnysource(host, tag), host, tensors,
                                           c10d::OpType::RECVANYSOURCE);
  }

  WorkPtr barrier(const c10d::BarrierOptions& opts) override {
    // As NCCL's barrier follows the collectives before it: those in flight finish first.
    wait_in_flight();
    c10d::BarrierOptions host_opts;
    host_opts.timeout = opts.timeout;
    host_->barrier(host_opts)->wait();
    return finished({}, false);
  }

  // A coalesced batch is its calls in order; the batch's Work (the only one c10d's
  // coalescing manager keeps) completes when all of them have.
  void startCoalescing() override {
    std::lock_guard<std::mutex> lock(in_flight_mutex_);
    coalescing_ = true;
    coalesced_.clear();
  }
  WorkPtr endCoalescing() override {
    std::vector<WorkPtr> works;
    {
      std::lock_guard<std::mutex> lock(in_flight_mutex_);
      coalescing_ = false;
      works.swap(coalesced_);
    }
    return all_of(works, {});
  }

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool wait_all_ranks) override {
    host_->monitoredBarrier(opts, wait_all_ranks);
  }
  void setSequenceNumberForGroup() override { host_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return host_->getSequenceNumberForGroup(); }
  void setTimeout(std::chrono::milliseconds timeout) override { host_->setTimeout(timeout); }

 private:
  void check_tpu(const Tensors& tensors, const char* op) const {
    for (const auto& t : tensors) {
      TORCH_CHECK(t.defined(), "tpu_dist: ", op, " got an undefined tensor");
      TORCH_CHECK(t.is_privateuseone(), "tpu_dist: ", op, " got a tensor on ", t.device(),
                  "; tpu_dist serves tpu tensors (the group's gloo backend serves CPU tensors: do not mix "
                  "devices in one call)");
      TORCH_CHECK(!t.is_sparse(), "tpu_dist: ", op, " does not take sparse tensors");
    }
  }

  // A collective's event in torch.profiler, from construction to the end of its scope.
  struct Traced : engine::trace::Span {
    Traced(const char* op, const Tensors& tensors)
        : Span(engine::trace::Kind::Collective, tensors.empty() ? 0 : tensors[0].device().index()) {
      t_collective = op;
      if (!active()) return;
      int64_t bytes = 0;
      for (const auto& t : tensors) bytes += static_cast<int64_t>(t.nbytes());
      event().name = op;
      event().args = {{"bytes", std::to_string(bytes)}};
    }
  };

  // A collective that has finished: its Work is done and its future holds the
  // output tensors (DDP's reducer reads them from there). A group of one's
  // collectives finish on the device, with no host transfer.
  static WorkPtr finished(const Tensors& outputs, bool on_device) {
    count_collective(on_device);
    return completed(outputs);
  }
  static WorkPtr completed(const Tensors& outputs) {
    auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    future->markCompleted(c10::IValue(outputs));
    return c10d::Work::create_from_future(future);
  }

  // A collective whose host part runs on the host backend's threads: `finish` (the
  // copy of the host results into the caller's tpu tensors) runs on the thread that
  // completes it, and the returned Work (and its future, holding `outputs`)
  // completes after that. The caller goes on at once: with async_op=True the step's
  // other work overlaps the transfer (DDP's bucket all-reduces overlap backward);
  // a blocking call waits on the Work, as with NCCL.
  WorkPtr in_flight(WorkPtr host_work, const Tensors& outputs, std::function<void()> finish) {
    count_collective();
    uint64_t number = ++collectives_;
    auto future = host_work->getFuture()->then(
        [host_work, outputs, finish = std::move(finish), failure = failure_, op = t_collective,
         number](c10::ivalue::Future& done) {
          if (done.hasError()) failure->raise(op, number, done.tryRetrieveErrorMessage());
          // This thread has autograd's default state; the copy into a parameter
          // (DDP's broadcast of module states) is not a differentiable write.
          at::NoGradGuard no_grad;
          struct Completing {
            Completing() { t_completing = true; }
            ~Completing() { t_completing = false; }
          } completing;
          finish();
          return c10::IValue(outputs);
        },
        c10::ListType::create(c10::TensorType::get()));
    WorkPtr work = c10::make_intrusive<InFlightWork>(future, host_work->retrieveOpType());
    {
      std::lock_guard<std::mutex> lock(in_flight_mutex_);
      InFlight entry{future, {}};
      for (const auto& t : outputs) entry.storages.push_back(t.storage().unsafeGetStorageImpl());
      in_flight_.push_back(std::move(entry));
      if (coalescing_) coalesced_.push_back(work);
    }
    Outstanding::get().add(future);
    if (blocking()) work->wait();
    return work;
  }

  // As the collectives of one NCCL communicator are ordered on its stream: a
  // collective that reads or writes a tensor an earlier one still writes waits for it.
  void after_in_flight(const Tensors& tensors) {
    std::vector<c10::intrusive_ptr<c10::ivalue::Future>> earlier;
    {
      std::lock_guard<std::mutex> lock(in_flight_mutex_);
      while (!in_flight_.empty() && in_flight_.front().future->completed()) in_flight_.pop_front();
      for (const auto& entry : in_flight_) {
        if (entry.future->completed()) continue;
        for (const auto& t : tensors)
          if (std::find(entry.storages.begin(), entry.storages.end(), t.storage().unsafeGetStorageImpl()) !=
              entry.storages.end()) {
            earlier.push_back(entry.future);
            break;
          }
      }
    }
    for (auto& f : earlier) f->wait();  // an earlier failure is raised by its own Work, not here
  }

  void wait_in_flight() {
    std::deque<InFlight> all;
    {
      std::lock_guard<std::mutex> lock(in_flight_mutex_);
      all.swap(in_flight_);
    }
    for (auto& entry : all) entry.future->wait();
  }

  // One Work for several: completes when all have, its future holding `outputs`.
  static WorkPtr all_of(const std::vector<WorkPtr>& works, const Tensors& outputs) {
    if (works.empty()) return completed(outputs);
    if (works.size() == 1 && outputs.empty()) return works[0];
    c10::List<c10::intrusive_ptr<c10::ivalue::Future>> futures(c10::FutureType::create(c10::AnyType::get()));
    for (const auto& w : works) futures.push_back(w->getFuture());
    auto future = c10::collectAll(futures)->then(
        [outputs](c10::ivalue::Future& done) {
          for (const auto& f : done.value().toList()) f.get().toFuture()->value();  // the first error, if any
          return c10::IValue(outputs);
        },
        c10::ListType::create(c10::TensorType::get()));
    return c10::make_intrusive<InFlightWork>(future, c10d::OpType::COALESCED);
  }

  // torch_tpu.metrics()["collectives"]: one per call of the backend; a coalesced
  // call's parts count as one (OneCount alive while they are made).
  static inline thread_local bool t_in_batch = false;
  struct OneCount {
    OneCount() { t_in_batch = true; }
    ~OneCount() { t_in_batch = false; }
  };
  static void add_collective_metrics(bool on_device = false) {
    engine::metrics().add("collectives");
    engine::metrics().add(on_device ? "collectives_device_transport" : "collectives_host_transport");
  }
  static void count_collective(bool on_device = false) {
    if (!t_in_batch) add_collective_metrics(on_device);
  }

  // TORCH_TPU_DIST_BLOCKING=1: each collective completes in its call.
  static bool blocking() {
    static const bool blocking = engine::config::flag(engine::config::Knob::DistBlocking);
    return blocking;
  }

  static void count_staged(const at::Tensor& host) {
    engine::metrics().add("collective_host_bytes", static_cast<double>(host.nbytes()));
  }

  // Contiguous host copies, scaled first by a PREMUL_SUM factor (on the device,
  // so the caller's tensors stay as they were).
  Tensors to_host(const Tensors& tensors, const Reduction* r = nullptr) {
    Tensors host;
    host.reserve(tensors.size());
    for (const auto& t : tensors) {
      at::Tensor source = t;
      if (r && r->pre_factor) source = t * r->factor_for(t);
      host.push_back(source.to(at::kCPU, /*non_blocking=*/false, /*copy=*/false, at::MemoryFormat::Contiguous));
      count_staged(host.back());
    }
    return host;
  }

  // allreduce and allreduce_coalesced: `host_call` runs the host backend's
  // collective on the staged copies with the host's reduce op.
  template <class Options, class HostCall>
  WorkPtr reduced_everywhere(Tensors& tensors, const Options& opts, const char* op, HostCall&& host_call) {
    Traced traced(op, tensors);
    check_tpu(tensors, op);
    const Reduction r = plan_reduction(opts.reduceOp, size_);
    if (size_ == 1) return finished(reduced_alone(tensors, r), true);
    after_in_flight(tensors);
    Tensors host = to_host(tensors, &r);
    Options host_opts = opts;
    host_opts.reduceOp = r.host_op;
    int64_t divisor = r.divisor;
    return in_flight(host_call(host, host_opts), tensors,
                     [tensors, host, divisor]() mutable { copy_back(tensors, host, divisor); });
  }

  // allgather and gather: every input staged, the host's lists of outputs
  // copied back into the caller's.
  template <class HostCall>
  WorkPtr gathered_lists(std::vector<Tensors>& outputs, Tensors& inputs, const char* op, HostCall&& host_call) {
    Traced traced(op, inputs);
    check_tpu(inputs, op);
    for (auto& list : outputs) check_tpu(list, op);
    Tensors all_outputs = flatten(outputs);
    after_in_flight(inputs);
    after_in_flight(all_outputs);
    Tensors host_in = to_host(inputs);
    std::vector<Tensors> host_out;
    for (auto& list : outputs) host_out.push_back(host_like(list));
    return in_flight(host_call(host_out, host_in), all_outputs, [outputs, host_out]() mutable {
      for (size_t i = 0; i < outputs.size(); ++i) copy_back(outputs[i], host_out[i]);
    });
  }

  // The coalesced tensor collectives: one per (output, input) pair.
  template <class One>
  WorkPtr pairwise(Tensors& outputs, Tensors& inputs, const char* op, One&& one) {
    Traced traced(op, inputs);
    TORCH_CHECK(outputs.size() == inputs.size(), "tpu_dist: ", op, " got ", outputs.size(), " outputs for ",
                inputs.size(), " inputs");
    std::vector<WorkPtr> works;
    {
      OneCount batch;
      for (size_t i = 0; i < inputs.size(); ++i) works.push_back(one(outputs[i], inputs[i]));
    }
    count_collective();
    return all_of(works, outputs);
  }

  // A group of one: the reduction of a rank's own tensors is the tensors
  // themselves (scaled by PREMUL_SUM's factor), with no trip through the host.
  static Tensors reduced_alone(Tensors& tensors, const Reduction& r) {
    if (r.pre_factor)
      for (auto& t : tensors) t.mul_(r.factor_for(t));
    return tensors;
  }

  static Tensors host_like(const Tensors& tensors) {
    Tensors host;
    host.reserve(tensors.size());
    for (const auto& t : tensors) host.push_back(at::empty(t.sizes(), t.options().device(at::kCPU)));
    return host;
  }

  // Writes the host results into the caller's tensors (through their views);
  // AVG divides on the device afterwards, as the integer division of NCCL's AVG.
  static void copy_back(Tensors& tensors, const Tensors& host, int64_t divisor = 1) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      tensors[i].copy_(host[i]);
      if (divisor == 1) continue;
      if (at::isIntegralType(tensors[i].scalar_type(), /*includeBool=*/true))
        tensors[i].div_(divisor, "trunc");
      else
        tensors[i].div_(divisor);
    }
  }

  static Tensors flatten(const std::vector<Tensors>& lists) {
    Tensors all;
    for (const auto& list : lists) all.insert(all.end(), list.begin(), list.end());
    return all;
  }

  // all_gather_into_tensor: rank i's input lands in the i-th of `size` equal
  // parts of `output` (along its flattened elements, as NCCL lays it out).
  WorkPtr gather_into(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
    Tensors in{input}, out{output};
    check_tpu(in, "all_gather_into_tensor");
    check_tpu(out, "all_gather_into_tensor");
    TORCH_CHECK(output.numel() == input.numel() * size_, "tpu_dist: all_gather_into_tensor output has ",
                output.numel(), " elements, not the input's ", input.numel(), " times the group size ", size_);
    TORCH_CHECK(output.scalar_type() == input.scalar_type(), "tpu_dist: all_gather_into_tensor output dtype ",
                output.scalar_type(), " differs from the input's ", input.scalar_type());
    if (size_ == 1) {
      output.copy_(input.view(output.sizes()));
      return finished(out, true);
    }
    after_in_flight(in);
    after_in_flight(out);
    Tensors host_in = to_host(in);
    at::Tensor host_out = at::empty({output.numel()}, output.options().device(at::kCPU));
    std::vector<Tensors> parts(1);
    for (int i = 0; i < size_; ++i) parts[0].push_back(host_out.narrow(0, i * input.numel(), input.numel()).view(input.sizes()));
    return in_flight(host_->allgather(parts, host_in, opts), out,
                     [output, host_out]() mutable { output.copy_(host_out.view(output.sizes())); });
  }

  // reduce_scatter_tensor: the reduction of every rank's input, of which this
  // rank keeps the rank-th of `size` equal parts.
  WorkPtr scatter_reduced(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
    Tensors in{input}, out{output};
    check_tpu(in, "reduce_scatter_tensor");
    check_tpu(out, "reduce_scatter_tensor");
    TORCH_CHECK(input.numel() == output.numel() * size_, "tpu_dist: reduce_scatter_tensor input has ",
                input.numel(), " elements, not the output's ", output.numel(), " times the group size ", size_);
    TORCH_CHECK(output.scalar_type() == input.scalar_type(), "tpu_dist: reduce_scatter_tensor output dtype ",
                output.scalar_type(), " differs from the input's ", input.scalar_type());
    const Reduction r = plan_reduction(opts.reduceOp, size_);
    if (size_ == 1) {
      output.copy_(input.view(output.sizes()));
      reduced_alone(out, r);  // scales the output, never the input
      return finished(out, true);
    }
    after_in_flight(in);
    after_in_flight(out);
    Tensors host = to_host(in, &r);
    c10d::AllreduceOptions host_opts;
    host_opts.reduceOp = r.host_op;
    host_opts.timeout = opts.timeout;
    Tensors mine{host[0].view({-1}).narrow(0, rank_ * output.numel(), output.numel()).view(output.sizes())};
    int64_t divisor = r.divisor;
    return in_flight(host_->allreduce(host, host_opts), out,
                     [out, mine, divisor]() mutable { copy_back(out, mine, divisor); });
  }

  c10::intrusive_ptr<c10d::Backend> host_;
  std::shared_ptr<const FailureReport> failure_;  // shared with completions that may outlive the backend
  std::atomic<uint64_t> collectives_{0};          // numbers the group's collectives, for failure reports
  // Collectives whose results are not yet in their tensors, oldest first.
  struct InFlight {
    c10::intrusive_ptr<c10::ivalue::Future> future;
    std::vector<const c10::StorageImpl*> storages;  // what the collective writes
  };
  std::mutex in_flight_mutex_;
  std::deque<InFlight> in_flight_;
  bool coalescing_ = false;
  std::vector<WorkPtr> coalesced_;
};

}  // namespace

void bind_host_staged_backend(pybind11::module_& m) {
  namespace py = pybind11;
  // c10d's Python types exist once torch.distributed is imported, so the
  // class is registered on first use rather than when torch_tpu._C loads.
  m.def("_register_host_staged_backend", [m]() mutable {
    if (py::hasattr(m, "_HostStagedBackend")) return;
    py::class_<HostStagedBackend, c10d::Backend, c10::intrusive_ptr<HostStagedBackend>>(m, "_HostStagedBackend")
        .def(py::init([](const c10::intrusive_ptr<c10d::Backend>& host, const c10::intrusive_ptr<c10d::Store>& store,
                         int rank, int size) { return c10::make_intrusive<HostStagedBackend>(host, store, rank, size); }),
             py::arg("host_backend"), py::arg("store"), py::arg("rank"), py::arg("size"));
  });
}

}  // namespace tpu::distributed
