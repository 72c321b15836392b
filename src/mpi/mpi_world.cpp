// MpiWorld and the MPI stage link. Every wait polls (MPI_Iprobe / MPI_Test with a short sleep)
// against a deadline instead of blocking in MPI_Recv: a dead or stuck stage becomes an error
// naming it, and ranks that outnumber the cores do not spin against each other.
#include "mpi/mpi_world.h"

#include <fmt/format.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdlib>
#include <thread>

#include "core/error.h"

namespace sluice {

namespace {

constexpr int kTagHidden = 1;
constexpr int kTagToken = 2;
constexpr int kTagOrders = 3;
constexpr int kTagSlots = 4;
constexpr int kTagLogits = 5;

// Between polls: for the first kSpin of a wait only yield the core, then sleep kPoll per poll.
// An expert-parallel rank waits at every layer for its peers' experts (a few ms at most, the
// imbalance of that layer's routing), and a sleep's wake-up (about 100 µs with timer slack) at
// each of those waits would add up over a token; a yield leaves the core at once to any other
// process that wants it (ranks that outnumber the cores), and costs nothing otherwise. Long waits
// (a follower waiting for the next request) sleep, leaving the core idle.
constexpr auto kSpin = std::chrono::milliseconds(20);
constexpr auto kPoll = std::chrono::microseconds(50);
class PollPause {
 public:
  void operator()() {
    if (std::chrono::steady_clock::now() - start_ < kSpin) std::this_thread::yield();
    else std::this_thread::sleep_for(kPoll);
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : 0;
}

// One link serves both splits. --split-mode layer: stage s is rank s running spans[s].
// --split-mode experts (a placement given): every rank runs every layer, so no hidden state
// crosses; the link carries the step's orders, each MoE layer's slots and each rank's logit
// columns (its rows of the output head) to every other rank, each of which samples.
class MpiStageLink final : public StageLink, public ExpertShard, public HeadShard {
 public:
  MpiStageLink(int rank, std::vector<std::string> hosts, std::vector<LayerSpan> spans,
               double timeout, std::optional<ExpertPlacement> placement = std::nullopt)
      : rank_(rank),
        hosts_(std::move(hosts)),
        spans_(std::move(spans)),
        timeout_(timeout),
        placement_(std::move(placement)) {}

  int stage() const override { return rank_; }
  int n_stages() const override { return static_cast<int>(hosts_.size()); }
  bool splits_layers() const override { return !placement_; }

  std::string describe(int s) const override {
    if (placement_)
      return fmt::format("rank {} on {} (experts split, {} of {} routed experts{})", s, hosts_[s],
                         placement_->owned(s), placement_->total(),
                         placement_->replicated(s)
                             ? fmt::format(" and {} replicas", placement_->replicated(s))
                             : "");
    return fmt::format("stage {} (rank {} on {}, layers {}:{})", s, s, hosts_[s], spans_[s].begin,
                       spans_[s].end);
  }

  int rank() const override { return rank_; }
  bool holds(int il, int e) const override { return placement_->holds(il, e, rank_); }
  std::span<const int16_t> assign(int il, std::span<const int32_t> ids, int n_used,
                                  const uint8_t* active) override {
    placement_->assign(il, ids, n_used, active, slot_rank_);
    return slot_rank_;
  }

  // Every rank sends its own slots to every other (Isend first, so no pair waits on the other),
  // then takes each peer's in turn; sizes follow from the shared routing, so a mismatch means the
  // ranks disagree and is an error, not a truncation.
  void exchange(int il, std::span<const int16_t> slot_rank, int64_t n_embd,
                float* slot_out) override {
    const int n = n_stages();
    send_.clear();
    std::vector<int> expect(n, 0);
    for (size_t i = 0; i < slot_rank.size(); ++i) {
      const int r = slot_rank[i];
      if (r < 0) continue;
      ++expect[r];
      if (r == rank_) send_.insert(send_.end(), slot_out + i * n_embd, slot_out + (i + 1) * n_embd);
    }
    Sends sent = send_to_others(send_, kTagSlots);
    for (int r = 0; r < n; ++r) {
      if (r == rank_) continue;
      MPI_Status st = probe(r, kTagSlots, "its experts' outputs");
      int count = 0;
      MPI_Get_count(&st, MPI_FLOAT, &count);
      if (count != expect[r] * n_embd)
        fail("{} sent {} floats of layer {}'s expert outputs, {} expected {}: the ranks disagree "
             "on the routing",
             describe(r), count, il, describe(rank_), expect[r] * n_embd);
      recv_.resize(count);
      const auto t0 = Clock::now();
      MPI_Recv(recv_.data(), count, MPI_FLOAT, r, kTagSlots, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      traffic_.transfer_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      traffic_.bytes_received += static_cast<uint64_t>(count) * sizeof(float);
      ++traffic_.messages;
      const float* from = recv_.data();
      for (size_t i = 0; i < slot_rank.size(); ++i)
        if (slot_rank[i] == r) {
          std::copy_n(from, n_embd, slot_out + i * n_embd);
          from += n_embd;
        }
    }
    wait_all(sent, "its experts' outputs");
  }

  int head_rank() const override { return rank_; }
  int head_ranks() const override { return n_stages(); }

  // Every rank sends its columns to every other (Isend first, as in exchange) and places theirs,
  // so every rank ends with the whole rows and samples them itself (decode_steps): one exchange
  // whose messages cross at once, instead of a gather to the sampling rank followed by a second
  // trip that carries its token back.
  void gather_logits(const std::vector<float>& part, int64_t n_rows, int64_t n_vocab,
                     std::vector<float>& logits) override {
    const int n = n_stages();
    logits.resize(static_cast<size_t>(n_rows * n_vocab));
    auto place = [&](const float* from, HeadRows cols) {
      for (int64_t t = 0; t < n_rows; ++t)
        std::copy_n(from + t * cols.size(), cols.size(), logits.data() + t * n_vocab + cols.begin);
    };
    Sends sent = send_to_others(part, kTagLogits);
    place(part.data(), head_rows_of(rank_, n, n_vocab));
    for (int r = 0; r < n; ++r) {
      if (r == rank_) continue;
      const HeadRows cols = head_rows_of(r, n, n_vocab);
      MPI_Status st = probe(r, kTagLogits, "its logits");
      int count = 0;
      MPI_Get_count(&st, MPI_FLOAT, &count);
      if (count != n_rows * cols.size())
        fail("{} sent {} logits, {} expected {} ({} rows of vocabulary {}:{}): the ranks disagree "
             "on the step",
             describe(r), count, describe(rank_), n_rows * cols.size(), n_rows, cols.begin,
             cols.end);
      recv_.resize(count);
      const auto t0 = Clock::now();
      MPI_Recv(recv_.data(), count, MPI_FLOAT, r, kTagLogits, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      traffic_.transfer_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      traffic_.bytes_received += static_cast<uint64_t>(count) * sizeof(float);
      ++traffic_.messages;
      place(recv_.data(), cols);
    }
    wait_all(sent, "its logits");
  }

  Traffic traffic() const override { return traffic_; }

  void send_hidden(std::span<const float> hidden) override {
    traffic_.bytes_sent += hidden.size_bytes();
    ++traffic_.messages;
    MPI_Request req;
    MPI_Isend(hidden.data(), static_cast<int>(hidden.size()), MPI_FLOAT, rank_ + 1, kTagHidden,
              MPI_COMM_WORLD, &req);
    wait_sent(&req, rank_ + 1, "a hidden state");
  }

  void recv_hidden(std::span<float> hidden) override {
    const int from = rank_ - 1;
    MPI_Status st = probe(from, kTagHidden, "a hidden state");
    int count = 0;
    MPI_Get_count(&st, MPI_FLOAT, &count);
    if (count != static_cast<int>(hidden.size()))
      fail("{} sent a hidden state of {} floats, {} expected {}: the stages disagree on the batch",
           describe(from), count, describe(rank_), hidden.size());
    const auto t0 = Clock::now();
    MPI_Recv(hidden.data(), count, MPI_FLOAT, from, kTagHidden, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    traffic_.transfer_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    traffic_.bytes_received += hidden.size_bytes();
    ++traffic_.messages;
  }

  void share_tokens(std::span<int32_t> tokens) override {
    const int last_rank = n_stages() - 1;
    const int n = static_cast<int>(tokens.size());
    if (rank_ == last_rank) {
      std::vector<MPI_Request> reqs(last_rank);
      for (int r = 0; r < last_rank; ++r)
        MPI_Isend(tokens.data(), n, MPI_INT32_T, r, kTagToken, MPI_COMM_WORLD, &reqs[r]);
      traffic_.bytes_sent += tokens.size_bytes() * last_rank;
      traffic_.messages += last_rank;
      for (int r = 0; r < last_rank; ++r) wait_sent(&reqs[r], r, "token ids");
      return;
    }
    MPI_Status st = probe(last_rank, kTagToken, "token ids");
    int count = 0;
    MPI_Get_count(&st, MPI_INT32_T, &count);
    if (count != n)
      fail("{} sent {} token ids, {} expected {}: the stages disagree on the step",
           describe(last_rank), count, describe(rank_), n);
    MPI_Recv(tokens.data(), n, MPI_INT32_T, last_rank, kTagToken, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    traffic_.bytes_received += tokens.size_bytes();
    ++traffic_.messages;
  }

  void broadcast(std::vector<uint8_t>& bytes) override {
    if (rank_ == 0) {
      const int n = static_cast<int>(bytes.size());
      std::vector<MPI_Request> reqs(n_stages() - 1);
      for (int r = 1; r < n_stages(); ++r)
        MPI_Isend(bytes.data(), n, MPI_BYTE, r, kTagOrders, MPI_COMM_WORLD, &reqs[r - 1]);
      traffic_.bytes_sent += bytes.size() * reqs.size();
      traffic_.messages += reqs.size();
      for (int r = 1; r < n_stages(); ++r) wait_sent(&reqs[r - 1], r, "the step's orders");
      return;
    }
    MPI_Status st = probe(0, kTagOrders, "the step's orders");
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    bytes.resize(count);
    MPI_Recv(bytes.data(), count, MPI_BYTE, 0, kTagOrders, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    traffic_.bytes_received += bytes.size();
    ++traffic_.messages;
  }

  double timeout() const override { return timeout_; }

 private:
  using Clock = std::chrono::steady_clock;

  [[noreturn]] void timed_out(int peer, const char* what, const char* verb) const {
    fail(
        "{} {} {} for {:.0f} s: it stopped responding (its process died, or its host is "
        "unreachable or stuck); "
        "{} gives up",
        describe(peer), verb, what, timeout_, describe(rank_));
  }

  MPI_Status probe(int from, int tag, const char* what) {
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration<double>(timeout_);
    MPI_Status st;
    PollPause pause;
    for (;;) {
      int flag = 0;
      MPI_Iprobe(from, tag, MPI_COMM_WORLD, &flag, &st);
      if (flag) {
        traffic_.wait_seconds += std::chrono::duration<double>(Clock::now() - start).count();
        return st;
      }
      if (Clock::now() > deadline) timed_out(from, what, "has not sent");
      pause();
    }
  }

  // Sends `data` to every other rank without waiting (Isend), so that no two ranks that trade
  // wait on each other before receiving; `data` must stay as it is until wait_all.
  struct Sends {
    std::vector<MPI_Request> reqs;
    std::vector<int> peers;  // parallel to reqs
  };
  Sends send_to_others(std::span<const float> data, int tag) {
    Sends s;
    for (int r = 0; r < n_stages(); ++r) {
      if (r == rank_) continue;
      s.peers.push_back(r);
      s.reqs.emplace_back();
      MPI_Isend(data.data(), static_cast<int>(data.size()), MPI_FLOAT, r, tag, MPI_COMM_WORLD,
                &s.reqs.back());
      traffic_.bytes_sent += data.size_bytes();
      ++traffic_.messages;
    }
    return s;
  }
  void wait_all(Sends& s, const char* what) const {
    for (size_t k = 0; k < s.reqs.size(); ++k) wait_sent(&s.reqs[k], s.peers[k], what);
  }

  void wait_sent(MPI_Request* req, int to, const char* what) const {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_);
    PollPause pause;
    for (;;) {
      int flag = 0;
      MPI_Test(req, &flag, MPI_STATUS_IGNORE);
      if (flag) return;
      if (Clock::now() > deadline) {
        MPI_Cancel(req);
        timed_out(to, what, "has not taken");
      }
      pause();
    }
  }

  int rank_;
  std::vector<std::string> hosts_;
  std::vector<LayerSpan> spans_;
  double timeout_;
  std::optional<ExpertPlacement> placement_;
  std::vector<float> send_, recv_;  // one layer's slots, reused
  std::vector<int16_t> slot_rank_;  // the last assign's answer
  Traffic traffic_;
};

}  // namespace

std::unique_ptr<MpiWorld> MpiWorld::start(int* argc, char*** argv) {
  // Open MPI, MPICH (Hydra / PMI) and PMIx launchers each say the job's size in the environment.
  const int size =
      std::max({env_int("OMPI_COMM_WORLD_SIZE"), env_int("PMI_SIZE"), env_int("PMIX_SIZE")});
  if (size <= 1) return nullptr;
  int provided = 0;
  // Serialized: a server's scheduler thread makes the calls while it runs, the main thread before
  // and after (never both at once).
  MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
  if (provided < MPI_THREAD_SERIALIZED)
    fail("this MPI library gives thread level {}, below MPI_THREAD_SERIALIZED", provided);
  int rank = 0, n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::unique_ptr<MpiWorld> w(new MpiWorld(rank, n, std::string(name, len)));
  w->hosts_ = w->all_gather(w->host_);
  return w;
}

MpiWorld::MpiWorld(int rank, int size, std::string host)
    : rank_(rank), size_(size), host_(std::move(host)) {}

MpiWorld::~MpiWorld() {
  MPI_Finalize();
}

std::vector<std::string> MpiWorld::all_gather(const std::string& mine) const {
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(size_), offsets(size_);
  MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < size_; ++r) {
    offsets[r] = total;
    total += lens[r];
  }
  std::string all(total, '\0');
  MPI_Allgatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR,
                 MPI_COMM_WORLD);
  std::vector<std::string> out(size_);
  for (int r = 0; r < size_; ++r) out[r] = all.substr(offsets[r], lens[r]);
  return out;
}

std::shared_ptr<StageLink> MpiWorld::link(const std::vector<LayerSpan>& spans,
                                          double timeout_seconds) {
  if (static_cast<int>(spans.size()) != size_)
    fail("{} stages for {} MPI ranks: expected one per rank", spans.size(), size_);
  return std::make_shared<MpiStageLink>(rank_, hosts_, spans, timeout_seconds);
}

MpiWorld::ExpertLink MpiWorld::expert_link(const ExpertPlacement& placement,
                                            double timeout_seconds) {
  if (placement.n_ranks != size_)
    fail("internal: an expert placement over {} ranks for {} MPI ranks", placement.n_ranks, size_);
  auto link = std::make_shared<MpiStageLink>(
      rank_, hosts_, std::vector<LayerSpan>(size_, LayerSpan{}), timeout_seconds, placement);
  return {link, link, link};
}

std::string MpiWorld::broadcast_from_root(const std::string& text) const {
  int len = static_cast<int>(text.size());
  MPI_Bcast(&len, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string out = rank_ == 0 ? text : std::string(len, '\0');
  MPI_Bcast(out.data(), len, MPI_CHAR, 0, MPI_COMM_WORLD);
  return out;
}

void MpiWorld::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace sluice
