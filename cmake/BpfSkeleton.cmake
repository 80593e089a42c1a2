# Build a CO-RE eBPF object and its libbpf skeleton at build time
# (docs/linux.md#build-and-attach): vmlinux.h from the running kernel's BTF,
# clang -target bpf, bpftool gen skeleton.
#
#   ht_bpf_find_tools()        finds clang, bpftool, libbpf, libelf, libdw, capstone, BTF;
#                              FATAL_ERROR naming the Debian packages when one is missing
#   ht_bpf_skeleton(NAME SRC OUTDIR DEPENDS...)
#                              NAME.bpf.o and NAME.skel.h in OUTDIR; sets NAME_SKEL to the header

set(HT_BPF_OFF_HINT "or configure with -DHEAPTRACE_WITH_BPF=OFF to build without the eBPF backend")

function(ht_bpf_missing what pkg)
  message(FATAL_ERROR "heaptrace eBPF backend: ${what} not found. "
    "Install the Debian package(s) ${pkg} (scripts/install-deps.sh), ${HT_BPF_OFF_HINT}.")
endfunction()

macro(ht_bpf_find_tools)
  find_program(HT_BPF_CLANG NAMES clang clang-19 clang-16 clang-15 clang-14)
  if(NOT HT_BPF_CLANG)
    ht_bpf_missing("clang (to compile the BPF program with -target bpf)" "clang-14 (or clang)")
  endif()
  find_program(HT_BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin /usr/local/sbin)
  if(NOT HT_BPFTOOL)
    ht_bpf_missing("bpftool (generates vmlinux.h and the skeleton)" "bpftool")
  endif()
  set(HT_BPF_BTF /sys/kernel/btf/vmlinux CACHE FILEPATH "kernel BTF used to generate vmlinux.h")
  if(NOT EXISTS ${HT_BPF_BTF})
    message(FATAL_ERROR "heaptrace eBPF backend: no kernel BTF at ${HT_BPF_BTF} (the kernel needs "
      "CONFIG_DEBUG_INFO_BTF=y; or point -DHT_BPF_BTF= at a BTF file), ${HT_BPF_OFF_HINT}.")
  endif()
  pkg_check_modules(LIBBPF IMPORTED_TARGET libbpf>=1.0)
  if(NOT LIBBPF_FOUND)
    ht_bpf_missing("libbpf >= 1.0" "libbpf-dev")
  endif()
  pkg_check_modules(LIBELF IMPORTED_TARGET libelf)
  if(NOT LIBELF_FOUND)
    ht_bpf_missing("libelf" "libelf-dev zlib1g-dev")
  endif()
  pkg_check_modules(LIBDW IMPORTED_TARGET libdw)
  if(NOT LIBDW_FOUND)
    ht_bpf_missing("libdw (elfutils, for --stacks dwarf)" "libdw-dev")
  endif()
  pkg_check_modules(CAPSTONE IMPORTED_TARGET capstone>=4.0)
  if(NOT CAPSTONE_FOUND)
    ht_bpf_missing("capstone >= 4.0 (the probe-site decoder)" "libcapstone-dev")
  endif()
endmacro()

function(ht_bpf_skeleton name src outdir)
  set(vmlinux ${outdir}/vmlinux.h)
  set(obj ${outdir}/${name}.bpf.o)
  set(skel ${outdir}/${name}.skel.h)
  add_custom_command(OUTPUT ${vmlinux}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${outdir}
    COMMAND sh -c "'${HT_BPFTOOL}' btf dump file '${HT_BPF_BTF}' format c > '${vmlinux}.tmp'"
    COMMAND ${CMAKE_COMMAND} -E rename ${vmlinux}.tmp ${vmlinux}
    COMMENT "vmlinux.h from ${HT_BPF_BTF}"
    VERBATIM)
  add_custom_command(OUTPUT ${obj}
    COMMAND ${HT_BPF_CLANG} -g -O2 -target bpf -D__TARGET_ARCH_x86 -Wall
            -I${outdir} -I${CMAKE_CURRENT_SOURCE_DIR} -c ${src} -o ${obj}
    DEPENDS ${src} ${vmlinux} ${ARGN}
    COMMENT "BPF object ${name}.bpf.o"
    VERBATIM)
  add_custom_command(OUTPUT ${skel}
    COMMAND sh -c "'${HT_BPFTOOL}' gen skeleton '${obj}' > '${skel}.tmp'"
    COMMAND ${CMAKE_COMMAND} -E rename ${skel}.tmp ${skel}
    DEPENDS ${obj}
    COMMENT "BPF skeleton ${name}.skel.h"
    VERBATIM)
  set(${name}_SKEL ${skel} PARENT_SCOPE)
endfunction()
