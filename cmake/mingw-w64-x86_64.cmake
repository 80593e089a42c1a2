# Cross toolchain for Windows x86-64 on Debian 12: gcc-mingw-w64-x86-64 (GCC 12) with the
# mingw-w64 v10 headers and CRT (scripts/test-windows.sh installs them).
#   cmake -S . -B build-win -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64-x86_64.cmake \
#         -DWIN_DEPS_PREFIX=$PWD/build-win/deps/prefix
# WIN_DEPS_PREFIX (cache variable or environment): the prefix that scripts/win-deps.sh fills
# with libuv, cJSON and zstd cross-built from Debian's source packages.
# The win32 thread model is enough for C and libuv (libuv brings its own threads); the posix
# one would pull in libwinpthread-1.dll for _Thread_local unless linked -static
# (measured with mingw-w64 10 / GCC 12 on Debian 12). The compiler is named with its thread model so
# that the machine's update-alternatives choice does not matter.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_VERSION 10.0)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(HT_MINGW_PREFIX x86_64-w64-mingw32)

if(NOT WIN_DEPS_PREFIX)
  set(WIN_DEPS_PREFIX "$ENV{WIN_DEPS_PREFIX}")
endif()
# try_compile() projects read the toolchain file again: pass the prefix on.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES WIN_DEPS_PREFIX)

set(CMAKE_C_COMPILER   ${HT_MINGW_PREFIX}-gcc-win32)
# C++ only for tests/apps' MemoryTestApp port (new, as in the article).
set(CMAKE_CXX_COMPILER ${HT_MINGW_PREFIX}-g++-win32)
set(CMAKE_RC_COMPILER  ${HT_MINGW_PREFIX}-windres)
set(CMAKE_AR           ${HT_MINGW_PREFIX}-ar CACHE FILEPATH "")
set(CMAKE_RANLIB       ${HT_MINGW_PREFIX}-ranlib CACHE FILEPATH "")

# Static executables: libgcc and the libraries come in the .exe, which then imports only
# system DLLs (KERNEL32, msvcrt, WS2_32, ...).
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")

# Headers, libraries and packages only from the target sysroot and the deps prefix;
# programs from the host.
set(CMAKE_FIND_ROOT_PATH /usr/${HT_MINGW_PREFIX} ${WIN_DEPS_PREFIX})
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# ctest runs every test .exe as "wine test.exe args..." (CMake's cross-compiling emulator).
find_program(WINE_EXECUTABLE NAMES wine wine64 PATHS /usr/bin NO_CMAKE_FIND_ROOT_PATH)
if(WINE_EXECUTABLE)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${WINE_EXECUTABLE})
endif()
