/* testpoint.h — named places where a test may kill the process, to prove that a kill there loses
 * nothing (tests/jobs/run_faults.sh, run_kill_points.sh), or stop it, to stand for a stall
 * (tests/jobs/run_claim_lost.sh) or to change what a run reads under it (run_identity.sh).
 *
 *     LH_TEST_KILL_AT=commit:3   SIGKILL at the third passage through lh_testpoint("commit")
 *     LH_TEST_KILL_AT=any:57     SIGKILL at the 57th passage through any test point
 *     LH_TEST_STOP_AT=prefill:2  SIGSTOP at the second passage through lh_testpoint("prefill"):
 *                                the process (every thread) waits there for a SIGCONT
 *     LH_TEST_STOP_AT=ingest:1+  SIGSTOP at the first passage through "ingest" and every one after
 *                                (a test steps the process: change something, SIGCONT, repeat)
 *     LH_TEST_POINTS=FILE        append each passage's name to FILE, one line each (to count them)
 *
 * With none of them set a test point costs one load and a branch. Thread-safe (the counters are
 * under a mutex); the kill is raise(SIGKILL), so nothing after the point runs: no flush, no atexit.
 */
#ifndef LH_UTIL_TESTPOINT_H
#define LH_UTIL_TESTPOINT_H

void lh_testpoint(const char *name);

#endif
