// Persistent workers for parallel_for. A job is published under a mutex with a generation
// counter; workers spin briefly on the counter (decode issues many short jobs back to back) and
// then sleep on a condition variable. One job at a time: concurrent callers queue on call_mu.
//
// Tasks are split into one contiguous range per participant (the caller is participant 0, worker
// i is participant i + 1). Each claims from its own range first and then helps the others, so
// the same task index tends to land on the same thread call after call: a matmul's row chunk
// then stays in that core's L2 across the passes of a looped model, while a stalled thread (a
// noisy neighbour) still cannot hold the job up.
#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TL_PAUSE() _mm_pause()
#else
#define TL_PAUSE() std::this_thread::yield()
#endif

#include "kernels/kernels.h"

namespace tinyloop::kern {

namespace {
constexpr int kSpinIterations = 4000;  // roughly 50-200 us before sleeping
thread_local const void* t_running_pool = nullptr;  // set while this thread runs a task

struct alignas(64) Range {  // one participant's share of the current job
    std::atomic<int> next{0};
    int end = 0;
};
}  // namespace

struct ThreadPool::Impl {
    int n_threads = 1;
    std::vector<std::thread> workers;
    std::unique_ptr<Range[]> ranges;

    std::mutex call_mu;  // serialises parallel_for callers

    std::mutex mu;  // guards job publication, joining and sleeping
    std::condition_variable cv_work;
    std::condition_variable cv_done;
    bool stop = false;
    std::atomic<uint64_t> generation{0};
    const std::function<void(int)>* fn = nullptr;  // nullptr: no open job
    int n_tasks = 0;
    std::atomic<int> done{0};
    std::atomic<int> joined{0};  // workers inside the current job
    std::exception_ptr error;    // first exception, guarded by mu

    void run_task(const std::function<void(int)>& f, int i, int n) {
        try {
            f(i);
        } catch (...) {  // every task still runs; the caller rethrows the first error
            std::lock_guard<std::mutex> lk(mu);
            if (!error) error = std::current_exception();
        }
        if (done.fetch_add(1, std::memory_order_acq_rel) + 1 == n) {
            std::lock_guard<std::mutex> lk(mu);  // no lost wake-up for a sleeping caller
            cv_done.notify_all();
        }
    }

    // Own range first, then the others' leftovers, until no task is unclaimed.
    void work(int self, const std::function<void(int)>& f, int n) {
        const void* outer = t_running_pool;
        t_running_pool = this;
        for (int r = 0; r < n_threads; ++r) {
            Range& rg = ranges[(self + r) % n_threads];
            for (;;) {
                const int i = rg.next.fetch_add(1, std::memory_order_relaxed);
                if (i >= rg.end) break;
                run_task(f, i, n);
            }
        }
        t_running_pool = outer;
    }

    void worker_loop(int self) {
        uint64_t seen = 0;
        for (;;) {
            bool fresh = false;
            for (int i = 0; i < kSpinIterations; ++i) {
                if (generation.load(std::memory_order_acquire) != seen) {
                    fresh = true;
                    break;
                }
                TL_PAUSE();
            }
            const std::function<void(int)>* f;
            int n;
            {
                std::unique_lock<std::mutex> lk(mu);
                if (!fresh) {
                    cv_work.wait(lk, [&] {
                        return stop || generation.load(std::memory_order_relaxed) != seen;
                    });
                }
                if (stop) return;
                seen = generation.load(std::memory_order_relaxed);
                f = fn;
                n = n_tasks;
                if (f == nullptr) continue;  // that job closed before this worker arrived
                joined.fetch_add(1, std::memory_order_relaxed);
            }
            work(self, *f, n);
            joined.fetch_sub(1, std::memory_order_release);
        }
    }
};

ThreadPool::ThreadPool(int n_threads) : impl_(std::make_unique<Impl>()) {
    Impl& s = *impl_;
    s.n_threads = n_threads < 1 ? 1 : n_threads;
    s.ranges = std::make_unique<Range[]>(static_cast<size_t>(s.n_threads));
    s.workers.reserve(static_cast<size_t>(s.n_threads - 1));
    for (int i = 1; i < s.n_threads; ++i) {
        s.workers.emplace_back([p = &s, i] { p->worker_loop(i); });
    }
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lk(impl_->mu);
        impl_->stop = true;
    }
    impl_->cv_work.notify_all();
    for (auto& w : impl_->workers) w.join();
}

int ThreadPool::size() const { return impl_->n_threads; }

void ThreadPool::parallel_for(int n_tasks, const std::function<void(int task)>& fn) {
    if (n_tasks <= 0) return;
    Impl& s = *impl_;
    // Inline: a one-thread pool, a single task, or a nested call from inside one of this pool's
    // tasks (which would otherwise wait on itself).
    if (s.n_threads == 1 || n_tasks == 1 || t_running_pool == &s) {
        std::exception_ptr err;
        for (int i = 0; i < n_tasks; ++i) {
            try {
                fn(i);
            } catch (...) {
                if (!err) err = std::current_exception();
            }
        }
        if (err) std::rethrow_exception(err);
        return;
    }
    std::lock_guard<std::mutex> call_lock(s.call_mu);
    {
        std::lock_guard<std::mutex> lk(s.mu);
        for (int k = 0; k < s.n_threads; ++k) {
            const long long lo = static_cast<long long>(n_tasks) * k / s.n_threads;
            s.ranges[k].next.store(static_cast<int>(lo), std::memory_order_relaxed);
            s.ranges[k].end = static_cast<int>(static_cast<long long>(n_tasks) * (k + 1) / s.n_threads);
        }
        s.fn = &fn;
        s.n_tasks = n_tasks;
        s.done.store(0, std::memory_order_relaxed);
        s.error = nullptr;
        s.generation.fetch_add(1, std::memory_order_release);
    }
    s.cv_work.notify_all();
    s.work(0, fn, n_tasks);
    // Wait for tasks still running on workers: spin a little, then sleep.
    for (int i = 0; i < kSpinIterations && s.done.load(std::memory_order_acquire) != n_tasks; ++i) {
        TL_PAUSE();
    }
    std::exception_ptr err;
    {
        std::unique_lock<std::mutex> lk(s.mu);
        s.cv_done.wait(lk, [&] { return s.done.load(std::memory_order_acquire) == n_tasks; });
        s.fn = nullptr;  // close the job: late workers see nothing to do
        s.n_tasks = 0;
        err = s.error;
        s.error = nullptr;
    }
    // Workers that joined may still be between their last claim and leaving; fn must outlive them.
    for (int i = 0; s.joined.load(std::memory_order_acquire) != 0; ++i) {
        if (i < kSpinIterations) {
            TL_PAUSE();
        } else {
            std::this_thread::yield();  // a joined worker was preempted (shared cores)
        }
    }
    if (err) std::rethrow_exception(err);
}

}  // namespace tinyloop::kern
