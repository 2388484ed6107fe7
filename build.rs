//! Build script: with the `dpdk` feature, find DPDK >= 22.11 with pkg-config,
//! compile the C shim in `dpdk/` and generate our own bindings with bindgen
//! from an allowlist. Without the feature it does nothing.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "dpdk")]
    dpdk::build();
}

#[cfg(feature = "dpdk")]
mod dpdk {
    use std::env;
    use std::path::PathBuf;
    use std::process::Command;

    const MIN_VERSION: &str = "22.11";
    const MISSING: &str = "DPDK >= 22.11 was not found with pkg-config.\n\
        Install the packages: apt-get install -y libdpdk-dev dpdk-dev pkg-config clang libclang-dev\n\
        (scripts/setup.sh does this), or build without DPDK: cargo build --no-default-features";

    fn pkg_config(args: &[&str]) -> Result<String, String> {
        let out = Command::new("pkg-config")
            .args(args)
            .output()
            .map_err(|e| format!("cannot run pkg-config ({e})"))?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn fail(detail: &str) -> ! {
        // One clear message, not a bindgen or linker backtrace.
        eprintln!("\nerror: {MISSING}\n  ({detail})\n");
        panic!("{MISSING}");
    }

    pub fn build() {
        for f in ["dpdk/shim.c", "dpdk/shim.h", "dpdk/wrapper.h"] {
            println!("cargo:rerun-if-changed={f}");
        }
        println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");
        println!("cargo:rerun-if-env-changed=PKG_CONFIG_LIBDIR");

        let version = pkg_config(&["--modversion", "libdpdk"]).unwrap_or_else(|e| fail(&e));
        if pkg_config(&["--atleast-version", MIN_VERSION, "libdpdk"]).is_err() {
            fail(&format!(
                "found libdpdk {version}, need {MIN_VERSION} or newer"
            ));
        }
        println!("cargo:rustc-env=FERROCE_DPDK_VERSION={version}");

        // --cflags carries `-include rte_config.h` and `-march=...`: both the C
        // compiler and bindgen need them to see the same structure layouts.
        let cflags = pkg_config(&["--cflags", "libdpdk"]).unwrap_or_else(|e| fail(&e));
        let cflags: Vec<String> = split_flags(&cflags);

        let mut cc = cc::Build::new();
        cc.file("dpdk/shim.c")
            .include("dpdk")
            .opt_level(3)
            .warnings(true);
        for f in &cflags {
            cc.flag(f);
        }
        cc.compile("ferroce_shim");

        link(env::var_os("CARGO_FEATURE_STATIC").is_some());
        bindings(&cflags);
    }

    /// Split pkg-config output into flags, keeping `-include X` as two flags.
    fn split_flags(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    fn link(statik: bool) {
        if statik {
            // Passed verbatim: the output carries --whole-archive around the
            // PMDs, which must stay in place for their constructors to run.
            let libs = pkg_config(&["--static", "--libs", "libdpdk"]).unwrap_or_else(|e| fail(&e));
            for arg in split_flags(&libs) {
                println!("cargo:rustc-link-arg={arg}");
            }
            return;
        }
        // Shared: DPDK loads every PMD from its plugin directory by itself.
        let libs = pkg_config(&["--libs", "libdpdk"]).unwrap_or_else(|e| fail(&e));
        for arg in split_flags(&libs) {
            if let Some(dir) = arg.strip_prefix("-L") {
                println!("cargo:rustc-link-search=native={dir}");
            } else if let Some(lib) = arg.strip_prefix("-l") {
                println!("cargo:rustc-link-lib={lib}");
            }
            // -Wl,--as-needed: rustc already links shared libraries as needed.
        }
        // rte_eth_from_rings (in-process port pairs) lives in the ring PMD,
        // which the libdpdk.pc of a shared install does not list.
        println!("cargo:rustc-link-lib=rte_net_ring");
    }

    fn bindings(cflags: &[String]) {
        let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("dpdk_bindings.rs");
        let functions = [
            "rte_eal_init",
            "rte_eal_cleanup",
            "rte_eal_get_runtime_dir",
            "rte_strerror",
            "rte_socket_id",
            "rte_lcore_count",
            "rte_pktmbuf_pool_create",
            "rte_pktmbuf_free_bulk",
            "rte_mempool_free",
            "rte_mempool_avail_count",
            "rte_mempool_in_use_count",
            "rte_ring_create",
            "rte_ring_free",
            "rte_eth_from_rings",
            "rte_eth_dev_count_avail",
            "rte_eth_dev_get_port_by_name",
            "rte_eth_dev_get_name_by_port",
            "rte_eth_dev_info_get",
            "rte_eth_dev_configure",
            "rte_eth_dev_adjust_nb_rx_tx_desc",
            "rte_eth_rx_queue_setup",
            "rte_eth_tx_queue_setup",
            "rte_eth_dev_start",
            "rte_eth_dev_stop",
            "rte_eth_dev_close",
            "rte_eth_dev_socket_id",
            "rte_eth_macaddr_get",
            "rte_eth_dev_set_mtu",
            "rte_eth_dev_get_mtu",
            "rte_eth_promiscuous_enable",
            "rte_eth_link_get_nowait",
            "rte_eth_stats_get",
            "rte_eth_stats_reset",
            "rte_dev_remove",
            "rte_thread_register",
            "rte_thread_unregister",
            "rte_intr_instance_alloc",
            "rte_intr_instance_free",
            "rte_intr_fd_set",
            "rte_intr_type_set",
            "rte_intr_callback_register",
            "ferroce_.*",
        ];
        let mut b = bindgen::Builder::default()
            .header("dpdk/wrapper.h")
            .clang_arg("-Idpdk")
            .clang_args(cflags)
            .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()))
            .allowlist_type("rte_eth_conf|rte_eth_rxconf|rte_eth_txconf|rte_eth_dev_info")
            .allowlist_type("rte_eth_link|rte_eth_stats|rte_ether_addr")
            .allowlist_var("RTE_ETH_LINK_.*|RTE_MBUF_DEFAULT_BUF_SIZE|RTE_PKTMBUF_HEADROOM")
            .allowlist_var("RING_F_.*|SOCKET_ID_ANY|RTE_ETH_NAME_MAX_LEN")
            // The mbuf and mempool are used only through pointers and the shim.
            .opaque_type("rte_mbuf|rte_mempool|rte_ring")
            .derive_default(true)
            .layout_tests(false)
            .generate_comments(false);
        for f in functions {
            b = b.allowlist_function(f);
        }
        let bindings = b
            .generate()
            .unwrap_or_else(|e| fail(&format!("bindgen over DPDK headers failed: {e}")));
        bindings.write_to_file(out).expect("write bindings");
    }
}
