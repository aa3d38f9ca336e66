/* commands.h — the longhaul subcommands. Each takes the arguments after its name (argv[0] is the
 * command name) and returns the process exit status: 0 success, 1 the work failed (some jobs
 * failed, a check found damage), 2 usage or set-up error. Commands print their own messages. */
#ifndef LH_CLI_COMMANDS_H
#define LH_CLI_COMMANDS_H

/* engine (cli/cmd_engine.c: logits, generate; cli/cmd_model.c: model info) */
int lh_cmd_logits(int argc, char **argv);
int lh_cmd_generate(int argc, char **argv);
int lh_cmd_model(int argc, char **argv);
/* tokenizer (cli/cmd_tokenize.c) and ingest (cli/cmd_ingest.c) */
int lh_cmd_tokenize(int argc, char **argv);
int lh_cmd_ingest(int argc, char **argv);
/* store (cli/cmd_store.c) */
int lh_cmd_store(int argc, char **argv); /* store ls|verify|gc */
/* jobs (cli/cmd_jobs.c) */
int lh_cmd_run(int argc, char **argv);
int lh_cmd_status(int argc, char **argv);
int lh_cmd_results(int argc, char **argv);
/* shards (cli/cmd_merge.c) */
int lh_cmd_merge(int argc, char **argv);
/* NIAH (cli/cmd_niah.c) */
int lh_cmd_niah(int argc, char **argv);

#define LH_EXIT_OK 0
#define LH_EXIT_FAILED 1
#define LH_EXIT_USAGE 2
/* stopped by the machine, not the work (a full disk, an I/O error, a damaged store, another run
 * holding OUT): fix that and rerun; sysexits' EX_TEMPFAIL */
#define LH_EXIT_TEMPFAIL 75
/* Whether a failed run or niah sweep ends with LH_EXIT_TEMPFAIL (the statuses above: a full disk,
 * an I/O error, a damaged store, another run holding OUT) rather than LH_EXIT_USAGE. */
#define LH_EXIT_IS_TEMPFAIL(st) ((st) == LH_EFULL || (st) == LH_EIO || (st) == LH_ECORRUPT || (st) == LH_EBUSY)
/* stopped by SIGINT or SIGTERM (128 + SIGINT, as a shell reports it) */
#define LH_EXIT_INTERRUPTED 130

#endif
