#!/usr/bin/env python3
"""Random-schedule model of the barrier protocol of src/ops/cuda/attention_forward_ws.cu (no GPU needed).

One actor per warpgroup (producer, consumer 0, consumer 1); the 256 consumer-thread arrivals on empty[s]
are 2 actor arrivals; a TMA copy completes at a random later step. For n_tiles 1..11, 2 and 3 stages and
300 schedules each it checks: no deadlock; every product reads the tile it expects; no copy lands in a
stage that an in-flight product reads; each named-barrier generation gets one sync or arrive from each
consumer, and each barrier ends with n_tiles + 1 generations. It models the kernel's order of waits,
turns and releases as written there; it does not model the hardware beyond mbarrier phase parity.
Run: python3 bench/attention_ws_protocol_model.py  (prints ok)
"""
import random


class MBar:
    """Phase counter: a phase completes when its arrivals are in and its announced bytes have landed."""

    def __init__(self, arrivals):
        self.arrivals, self.pending, self.tx, self.phase = arrivals, arrivals, 0, 0

    def arrive(self, tx=0):
        self.pending -= 1
        self.tx += tx
        self._advance()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        self._advance()

    def _advance(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.arrivals

    def waited(self, parity):  # mbarrier.try_wait.parity: the phase of this parity has completed
        return (self.phase & 1) != parity


def run(n_tiles, stages, seed):
    rnd = random.Random(seed)
    q_full = MBar(1)
    k_full = [MBar(1) for _ in range(stages)]
    v_full = [MBar(1) for _ in range(stages)]
    empty = [MBar(2) for _ in range(stages)]
    content = {}  # (kind, stage) -> tile held
    reading = {(kind, s): 0 for kind in "kv" for s in range(stages)}
    copies = []  # in flight: (barrier, kind, stage, tile)
    named = {1: [0, 0], 2: [0, 0]}  # barrier id -> [arrivals in this generation, generations completed]
    arrived = {1: set(), 2: set()}

    def named_arrive(bid, group):  # bar.arrive, and the arrival half of bar.sync
        assert group not in arrived[bid], "two arrivals of one consumer in one generation"
        arrived[bid].add(group)
        named[bid][0] += 1
        if named[bid][0] == 2:
            named[bid][0] = 0
            named[bid][1] += 1
            arrived[bid].clear()

    def named_sync(bid, group):
        generation = named[bid][1]
        named_arrive(bid, group)
        return lambda: named[bid][1] > generation

    def producer():
        q_full.arrive(1)
        copies.append((q_full, "q", 0, 0))
        for j in range(n_tiles):
            st, rnd_ = j % stages, j // stages
            if j >= stages:
                yield lambda st=st, r=rnd_: empty[st].waited((r - 1) & 1)
            assert reading[("k", st)] == 0 and reading[("v", st)] == 0, "copy into a stage being read"
            k_full[st].arrive(1)
            copies.append((k_full[st], "k", st, j))
            v_full[st].arrive(1)
            copies.append((v_full[st], "v", st, j))
            yield lambda: True

    def consumer(group):
        def products(reads):  # issue (reads checked and marked), then the wait
            for kind, st, tile in reads:
                assert content.get((kind, st)) == tile, (group, kind, st, tile, content)
                reading[(kind, st)] += 1
            return [(kind, st) for kind, st, _ in reads]

        def done(marks):
            for m in marks:
                reading[m] -= 1

        pass_turn = lambda: named_arrive(1 + (group ^ 1), group)
        yield lambda: q_full.waited(0)
        if group == 1:
            pass_turn()
        yield lambda: k_full[0].waited(0)
        yield named_sync(1 + group, group)
        marks = products([("k", 0, 0)])
        pass_turn()
        yield lambda: True
        done(marks)
        for j in range(n_tiles - 1):
            yield lambda j=j: v_full[j % stages].waited((j // stages) & 1)
            yield lambda j=j: k_full[(j + 1) % stages].waited(((j + 1) // stages) & 1)
            yield named_sync(1 + group, group)
            marks = products([("v", j % stages, j), ("k", (j + 1) % stages, j + 1)])
            pass_turn()
            yield lambda: True
            done(marks)
            empty[j % stages].arrive()
        last = n_tiles - 1
        yield lambda: v_full[last % stages].waited((last // stages) & 1)
        yield named_sync(1 + group, group)
        marks = products([("v", last % stages, last)])
        if group == 0:
            pass_turn()
        yield lambda: True
        done(marks)
        empty[last % stages].arrive()

    actors = [producer(), consumer(0), consumer(1)]
    ready = [next(a) for a in actors]
    alive = [True] * 3
    for _ in range(100000):
        if not any(alive) and not copies:
            break
        runnable = [i for i in range(3) if alive[i] and ready[i]()]
        if copies and (not runnable or rnd.random() < 0.3):
            bar, kind, st, tile = copies.pop(rnd.randrange(len(copies)))
            if kind != "q":
                content[(kind, st)] = tile
            bar.complete_tx(1)
            continue
        assert runnable, f"deadlock: n_tiles={n_tiles} stages={stages} seed={seed} named={named}"
        i = rnd.choice(runnable)
        try:
            ready[i] = next(actors[i])
        except StopIteration:
            alive[i] = False
    else:
        raise AssertionError("no progress")
    assert named[1] == [0, n_tiles + 1] and named[2] == [0, n_tiles + 1], named


if __name__ == "__main__":
    for n in range(1, 12):
        for stages in (2, 3):
            for seed in range(300):
                run(n, stages, seed)
    print("ok")
