//! The holders' protocol on a directory and a setting file of the test's
//! own: the host's setting is never touched here.

use super::*;

/// A registry in a fresh directory whose setting reads `setting`.
fn registry(name: &str, setting: &str) -> Registry {
    let dir = std::env::temp_dir().join(format!("splitnet-thp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("shmem_enabled");
    std::fs::write(&path, setting).unwrap();
    std::fs::create_dir_all(dir.join("holders")).unwrap();
    Registry {
        dir: dir.join("holders"),
        setting: path,
    }
}

fn holders(reg: &Registry) -> usize {
    std::fs::read_dir(&reg.dir).map_or(0, |rd| {
        rd.flatten()
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .count()
    })
}

/// A sweep puts `never` back and leaves no holder.
fn swept_back(reg: &Registry) {
    assert_eq!(sweep_in(reg).unwrap(), Some("never".into()));
    assert_eq!(reg.current().as_deref(), Some("never"));
    assert_eq!(holders(reg), 0);
}

fn done(reg: Registry) {
    let _ = std::fs::remove_dir_all(reg.setting.parent().unwrap());
}

/// A live holder that is not this process: a child and its file.
fn other_holder(reg: &Registry, word: &str) -> std::process::Child {
    let child = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    let file = reg.dir.join(format!("{pid}-{}", start_time(pid).unwrap()));
    record(&file, word).unwrap();
    child
}

#[test]
fn the_default_is_held_at_advise_and_put_back_by_the_last_to_go() {
    let reg = registry("changed", "always within_size advise [never] deny force");
    let (hold, how) = hold_in(reg.clone()).unwrap().expect("held");
    assert_eq!(
        how,
        Held::Changed {
            was: "never".into()
        }
    );
    assert_eq!(reg.current().as_deref(), Some("advise"));
    assert_eq!(hold.release().unwrap(), Some("never".into()));
    assert_eq!(reg.current().as_deref(), Some("never"));
    assert_eq!(holders(&reg), 0);
    done(reg);
}

#[test]
fn a_setting_of_the_hosts_own_is_left_alone() {
    for word in ["[always] within_size advise never deny force", "[deny]"] {
        let reg = registry("alone", word);
        assert!(hold_in(reg.clone()).unwrap().is_none(), "{word}");
        assert_eq!(std::fs::read_to_string(&reg.setting).unwrap(), word);
        assert_eq!(holders(&reg), 0);
        done(reg);
    }
}

#[test]
fn a_holder_joins_a_live_one_and_only_the_last_puts_back() {
    let reg = registry("join", "advise");
    let mut other = other_holder(&reg, "never");
    let (hold, how) = hold_in(reg.clone()).unwrap().expect("joined");
    assert_eq!(how, Held::Joined);
    // The other still holds: letting go puts nothing back.
    assert_eq!(hold.release().unwrap(), None);
    assert_eq!(reg.current().as_deref(), Some("advise"));
    assert_eq!(holders(&reg), 1);
    // It dies without letting go: a sweep counts it out and puts its
    // word back.
    other.kill().unwrap();
    other.wait().unwrap();
    swept_back(&reg);
    done(reg);
}

#[test]
fn a_dropped_hold_lets_go_and_a_dead_ones_record_is_taken_over() {
    let reg = registry("drop", "never");
    let (hold, _) = hold_in(reg.clone()).unwrap().expect("held");
    drop(hold);
    assert_eq!(reg.current().as_deref(), Some("never"));
    // A holder that died (no such process) while it held `advise`: the
    // next to hold counts it out, then changes the setting itself.
    reg.set("advise").unwrap();
    record(&reg.dir.join(format!("{}-1", i32::MAX)), "never").unwrap();
    let (hold, how) = hold_in(reg.clone()).unwrap().expect("held");
    assert_eq!(
        how,
        Held::Changed {
            was: "never".into()
        }
    );
    assert_eq!(holders(&reg), 1, "only ours is left");
    drop(hold);
    assert_eq!(reg.current().as_deref(), Some("never"));
    done(reg);
}

#[test]
fn a_record_that_is_not_a_word_of_the_kernels_is_not_written_back() {
    let reg = registry("torn", "advise");
    record(&reg.dir.join(format!("{}-1", i32::MAX)), "nev").unwrap();
    assert_eq!(sweep_in(&reg).unwrap(), None, "nothing was written");
    assert_eq!(reg.current().as_deref(), Some("advise"));
    // Beside a whole one, the whole one is put back.
    record(&reg.dir.join(format!("{}-1", i32::MAX)), "").unwrap();
    record(&reg.dir.join(format!("{}-2", i32::MAX)), "never").unwrap();
    swept_back(&reg);
    done(reg);
}

#[test]
fn a_name_that_is_no_holder_is_not_counted_live() {
    let reg = registry("names", "advise");
    record(&reg.dir.join("x-y"), "never").unwrap();
    swept_back(&reg);
    done(reg);
}
