// chorus: the command-line front end (demo, bench, launch, tune, model).
#include <CLI/CLI.hpp>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"chorus: collective communication for CPU ranks (threads, processes, hosts)"};
  app.require_subcommand(1);
  int exit_code = 0;
  chorus::cli::AddDemoCommand(app, exit_code);
  chorus::cli::AddBenchCommand(app, exit_code);
  chorus::cli::AddLaunchCommand(app, exit_code);
  chorus::cli::AddTuneCommand(app, exit_code);
  chorus::cli::AddModelCommand(app, exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
